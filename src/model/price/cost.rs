//! [`Cost`]: an amount of money, in whole nano-dollars, never a float.

use std::fmt;

/// An amount of money: whole nano-dollars (10⁻⁹ $), so that any number of
/// calls add up exactly. Displays as dollars (`$0.40`, `$0.421`), with at
/// least two decimals and as many more, up to six, as it needs (rounded up).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cost(u64);

impl Cost {
    /// Nothing.
    pub const ZERO: Cost = Cost(0);

    /// `nanos` nano-dollars.
    pub const fn from_nanos(nanos: u64) -> Cost {
        Cost(nanos)
    }

    /// `micros` micro-dollars (saturating).
    pub const fn from_micros(micros: u64) -> Cost {
        Cost(micros.saturating_mul(1_000))
    }

    /// `cents` cents (saturating): `Cost::from_cents(40)` is $0.40.
    pub const fn from_cents(cents: u64) -> Cost {
        Cost(cents.saturating_mul(10_000_000))
    }

    /// The amount in nano-dollars.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The sum, saturating.
    pub const fn saturating_add(self, other: Cost) -> Cost {
        Cost(self.0.saturating_add(other.0))
    }
}

impl fmt::Display for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // To the micro-dollar, rounded up (a cost is never shown as less
        // than it is, nor a non-zero one as nothing).
        let micros = self.0.div_ceil(1_000);
        let (dollars, fraction) = (micros / 1_000_000, micros % 1_000_000);
        let mut digits = format!("{fraction:06}");
        while digits.len() > 2 && digits.ends_with('0') {
            digits.pop();
        }
        write!(f, "${}.{digits}", thousands(dollars))
    }
}

/// `n` with a comma between thousands (`41,210`), as the spend limit's
/// messages write amounts and token counts.
#[doc(hidden)]
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_displays_in_dollars_rounded_up() {
        assert_eq!(Cost::from_cents(40).to_string(), "$0.40");
        assert_eq!(Cost::from_micros(421_000).to_string(), "$0.421");
        assert_eq!(Cost::from_nanos(1).to_string(), "$0.000001");
        assert_eq!(Cost::from_nanos(12_345).to_string(), "$0.000013");
        assert_eq!(Cost::from_nanos(999_999_999).to_string(), "$1.00");
        assert_eq!(
            Cost::from_nanos(1_234_567_000_000_000).to_string(),
            "$1,234,567.00"
        );
        assert_eq!(Cost::ZERO.to_string(), "$0.00");
    }
}
