//! [`LocalEmbedder`]: a sentence-transformers BERT model on the CPU, in
//! pure Rust (candle for the model, Hugging Face's `tokenizers` for its
//! tokenizer). No network at run time: the model is a directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{Tokenizer, TruncationParams};

use super::{Embed, EmbedError, EmbedFuture};

/// The most tokens a text is read by: a sentence model is trained on
/// short texts (all-MiniLM-L6-v2 on 128 tokens) and its cost grows with
/// the square of the length.
const MAX_TOKENS: usize = 256;

/// A sentence-transformers model of the BERT family (all-MiniLM-L6-v2,
/// bge-small-en, e5-small…), run on the CPU.
///
/// It loads from a directory laid out as sentence-transformers saves a
/// model: `config.json` (a BERT config), `model.safetensors` (F32 or F16
/// weights), `tokenizer.json`, and `1_Pooling/config.json` (mean or CLS
/// pooling; mean when the file is absent). Any such model from the
/// Hugging Face hub can be downloaded once and used offline; the tests use
/// all-MiniLM-L6-v2 (Apache-2.0, 90 MB, 384 dimensions — see
/// `docs/tools.md` for how to get it and what it costs).
///
/// Embedding runs on tokio's blocking threads, a batch at a time; texts
/// are read up to 256 tokens.
///
/// ```no_run
/// use toolstack::embed::{Embeddings, LocalEmbedder};
///
/// let model = LocalEmbedder::load("models/all-MiniLM-L6-v2")?;
/// let embeddings = Embeddings::new(model);
/// # Ok::<_, toolstack::embed::EmbedError>(())
/// ```
#[derive(Clone)]
pub struct LocalEmbedder {
    name: String,
    model: Arc<Model>,
}

struct Model {
    bert: BertModel,
    tokenizer: Tokenizer,
    pooling: Pooling,
    device: Device,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Pooling {
    Mean,
    Cls,
}

impl std::fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("name", &self.name)
            .field("pooling", &self.model.pooling)
            .finish_non_exhaustive()
    }
}

fn load_error(dir: &Path, what: impl std::fmt::Display) -> EmbedError {
    EmbedError::Load(format!(
        "{}: {what} (a sentence-transformers model directory holds config.json, \
         model.safetensors, tokenizer.json and 1_Pooling/config.json)",
        dir.display()
    ))
}

fn read(dir: &Path, file: &str) -> Result<Vec<u8>, EmbedError> {
    let path: PathBuf = dir.join(file);
    std::fs::read(&path).map_err(|err| match err.kind() {
        std::io::ErrorKind::NotFound => load_error(dir, format!("no {file}")),
        _ => load_error(dir, format!("{file} could not be read: {err}")),
    })
}

impl LocalEmbedder {
    /// Loads the model in `dir` (see the type's docs for the layout). The
    /// error names the file that is missing or wrong.
    pub fn load(dir: impl AsRef<Path>) -> Result<Self, EmbedError> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(load_error(dir, "not a directory"));
        }
        let config: Config = serde_json::from_slice(&read(dir, "config.json")?)
            .map_err(|err| load_error(dir, format!("config.json is not a BERT config: {err}")))?;
        let pooling = match read(dir, "1_Pooling/config.json") {
            Ok(bytes) => pooling(&bytes).map_err(|why| load_error(dir, why))?,
            Err(EmbedError::Load(why)) if why.contains("no 1_Pooling") => Pooling::Mean,
            Err(err) => return Err(err),
        };
        let mut tokenizer = Tokenizer::from_bytes(read(dir, "tokenizer.json")?)
            .map_err(|err| load_error(dir, format!("tokenizer.json does not load: {err}")))?;
        // Saved tokenizers often pad every text to a fixed length; the
        // batch is padded here, with the pads masked out of the pooling.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS.min(config_max_positions(dir)?),
                ..TruncationParams::default()
            }))
            .map_err(|err| load_error(dir, format!("tokenizer.json: {err}")))?;
        let device = Device::Cpu;
        let weights = read(dir, "model.safetensors")?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &device)
            .map_err(|err| load_error(dir, format!("model.safetensors does not load: {err}")))?;
        let bert = BertModel::load(vb, &config).map_err(|err| {
            load_error(
                dir,
                format!(
                    "model.safetensors does not hold the BERT model config.json describes: {err}"
                ),
            )
        })?;
        let name = dir.file_name().map_or_else(
            || dir.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        Ok(LocalEmbedder {
            name,
            model: Arc::new(Model {
                bert,
                tokenizer,
                pooling,
                device,
            }),
        })
    }
}

/// The longest input the model's positions allow.
fn config_max_positions(dir: &Path) -> Result<usize, EmbedError> {
    let config: serde_json::Value = serde_json::from_slice(&read(dir, "config.json")?)
        .map_err(|err| load_error(dir, format!("config.json: {err}")))?;
    Ok(config
        .get("max_position_embeddings")
        .and_then(serde_json::Value::as_u64)
        .map_or(512, |n| n as usize))
}

/// The pooling `1_Pooling/config.json` asks for.
fn pooling(bytes: &[u8]) -> Result<Pooling, String> {
    let config: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|err| format!("1_Pooling/config.json is not JSON: {err}"))?;
    let on = |key: &str| config.get(key).and_then(serde_json::Value::as_bool) == Some(true);
    match (on("pooling_mode_mean_tokens"), on("pooling_mode_cls_token")) {
        (true, false) => Ok(Pooling::Mean),
        (false, true) => Ok(Pooling::Cls),
        _ => Err("1_Pooling/config.json asks for a pooling other than mean or CLS alone".into()),
    }
}

impl Model {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let failed = |err: &dyn std::fmt::Display| EmbedError::Failed(err.to_string());
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|err| failed(&err))?;
        let longest = encodings
            .iter()
            .map(|e| e.get_ids().len())
            .max()
            .unwrap_or(0)
            .max(1);
        let mut ids = Vec::with_capacity(texts.len() * longest);
        let mut mask = Vec::with_capacity(texts.len() * longest);
        for encoding in &encodings {
            let real = encoding.get_ids();
            ids.extend_from_slice(real);
            ids.extend(std::iter::repeat_n(0, longest - real.len()));
            mask.extend(std::iter::repeat_n(1u32, real.len()));
            mask.extend(std::iter::repeat_n(0u32, longest - real.len()));
        }
        let shape = (texts.len(), longest);
        let run = || -> candle_core::Result<Vec<Vec<f32>>> {
            let ids = Tensor::from_vec(ids, shape, &self.device)?;
            let mask = Tensor::from_vec(mask, shape, &self.device)?;
            let types = ids.zeros_like()?;
            let hidden = self.bert.forward(&ids, &types, Some(&mask))?;
            let pooled = match self.pooling {
                Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1)?,
                Pooling::Mean => {
                    let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
                    let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
                    let counts = mask.sum(1)?;
                    summed.broadcast_div(&counts)?
                }
            };
            pooled.to_vec2::<f32>()
        };
        run().map_err(|err| failed(&err))
    }
}

impl Embed for LocalEmbedder {
    fn model(&self) -> &str {
        &self.name
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> EmbedFuture<'a> {
        let model = Arc::clone(&self.model);
        let texts = texts.to_vec();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || model.embed(&texts))
                .await
                .map_err(|err| EmbedError::Failed(format!("the embedding thread failed: {err}")))?
        })
    }

    fn max_batch(&self) -> usize {
        16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_a_model_says_what_is_missing() {
        let dir = std::env::temp_dir().join(format!("toolstack-no-model-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = LocalEmbedder::load(&dir).unwrap_err();
        assert!(matches!(err, EmbedError::Load(_)));
        assert!(err.to_string().contains("no config.json"), "{err}");
        std::fs::write(dir.join("config.json"), "{}").unwrap();
        let err = LocalEmbedder::load(&dir).unwrap_err();
        assert!(
            err.to_string().contains("config.json is not a BERT config"),
            "{err}"
        );
        let err = LocalEmbedder::load(dir.join("absent")).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pooling_is_mean_or_cls() {
        assert_eq!(
            pooling(br#"{"pooling_mode_mean_tokens": true}"#),
            Ok(Pooling::Mean)
        );
        assert_eq!(
            pooling(br#"{"pooling_mode_mean_tokens": false, "pooling_mode_cls_token": true}"#),
            Ok(Pooling::Cls)
        );
        assert!(pooling(br#"{"pooling_mode_max_tokens": true}"#).is_err());
    }
}
