//! [`canonical`]: a JSON value in the one form toolstack compares and
//! hashes arguments by (JavaScript's `canonicalJSON`).

use serde_json::Value;

/// `value` in its canonical JSON form, as JavaScript's `canonicalJSON`
/// writes it: object keys sorted by UTF-16 code units, no spaces, numbers
/// as `Number.prototype.toString` writes them (`2.0` is `2`). The one form
/// toolstack compares and hashes arguments by: the result cache's key, the
/// approval signature's digest (which the AI SDK computes the same way).
///
/// ```
/// let value = serde_json::json!({"b": [1, 2.0], "a": {"z": null, "y": "x"}});
/// assert_eq!(toolstack::arguments::canonical(&value), r#"{"a":{"y":"x","z":null},"b":[1,2]}"#);
/// ```
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    canonical_into(value, &mut out);
    out
}

/// [`canonical`], appended to `out`.
pub fn canonical_into(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical_into(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_into(item, out);
            }
            out.push(']');
        }
        Value::Number(number) => match number.as_f64() {
            Some(float) if number.is_f64() => out.push_str(&js_number(float)),
            // An integer JavaScript holds exactly is written as it is;
            // a larger one is the double it becomes.
            _ => match (number.as_i64(), number.as_u64()) {
                (Some(int), _) if int.unsigned_abs() <= 1 << 53 => out.push_str(&int.to_string()),
                (_, Some(int)) if int <= 1 << 53 => out.push_str(&int.to_string()),
                _ => out.push_str(&js_number(number.as_f64().unwrap_or(f64::NAN))),
            },
        },
        other => out.push_str(&other.to_string()),
    }
}

/// `x` as JavaScript's `Number.prototype.toString` writes it: the
/// shortest digits that read back, in plain notation from 1e-6 to below
/// 1e21, else in exponent notation (`1e+21`, `1.5e-7`).
fn js_number(x: f64) -> String {
    if x == 0.0 {
        return "0".to_owned();
    }
    if !x.is_finite() {
        // JSON has none; `JSON.stringify` writes `null`.
        return "null".to_owned();
    }
    let abs = x.abs();
    if (1e-6..1e21).contains(&abs) {
        return format!("{x}");
    }
    let exp = format!("{x:e}");
    match exp.split_once('e') {
        Some((mantissa, power)) if !power.starts_with('-') => format!("{mantissa}e+{power}"),
        _ => exp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_javascript_writes_them() {
        for (x, js) in [
            (1.0, "1"),
            (-0.0, "0"),
            (0.1, "0.1"),
            (1.5e-7, "1.5e-7"),
            (0.000001, "0.000001"),
            (1e21, "1e+21"),
            (123456789012345680000.0, "123456789012345680000"),
            (2.5e300, "2.5e+300"),
            (-3.75, "-3.75"),
        ] {
            assert_eq!(js_number(x), js, "{x}");
        }
    }

    #[test]
    fn canonical_json_sorts_keys_and_drops_spaces() {
        let value: Value =
            serde_json::from_str(r#"{"b": [1, 2.0, {"z": null, "a": "x\ny"}], "a": true}"#)
                .unwrap();
        assert_eq!(
            canonical(&value),
            r#"{"a":true,"b":[1,2,{"a":"x\ny","z":null}]}"#
        );
    }
}
