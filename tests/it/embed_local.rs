//! The local embedder on a real model (all-MiniLM-L6-v2), checked against
//! vectors computed independently of this crate
//! (`scripts/embedding_reference.py`: a numpy BERT forward pass, itself
//! checked against sentence-transformers), so a broken tokenizer, pooling
//! or weight loading fails here.
//!
//! The model is found through `TOOLSTACK_EMBEDDING_MODEL` (a directory;
//! `scripts/fetch-embedding-model.sh` puts it in
//! `target/models/all-MiniLM-L6-v2`, which is looked at too). Without it
//! the tests say SKIPPED on stderr, and fail when
//! `TOOLSTACK_REQUIRE_EMBEDDING_MODEL` is set (CI sets it once the model
//! is installed).

use std::path::PathBuf;

use toolstack::embed::{Embed, Embeddings, LocalEmbedder};
use toolstack::toolbox::{Ranking, ToolSearch};
use toolstack::{tool, ToolAnnotations, ToolError, Toolbox};

/// The model's directory, or `None` (said on stderr) when absent.
pub(crate) fn model_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("TOOLSTACK_EMBEDDING_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/models/all-MiniLM-L6-v2")
        });
    if dir.join("model.safetensors").exists() {
        return Some(dir);
    }
    let why = format!(
        "no embedding model at {} (run scripts/fetch-embedding-model.sh, or set TOOLSTACK_EMBEDDING_MODEL)",
        dir.display()
    );
    assert!(
        std::env::var_os("TOOLSTACK_REQUIRE_EMBEDDING_MODEL").is_none(),
        "TOOLSTACK_REQUIRE_EMBEDDING_MODEL is set but there is {why}"
    );
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "!! SKIPPED: the local embedder's tests did NOT run: {why}"
    );
    None
}

#[derive(serde::Deserialize)]
struct Reference {
    sentences: Vec<Sentence>,
    cosine: Vec<Vec<f32>>,
}

#[derive(serde::Deserialize)]
struct Sentence {
    text: String,
    first_components: Vec<f32>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vectors_match_an_independent_reference() {
    let Some(dir) = model_dir() else { return };
    let reference: Reference =
        serde_json::from_str(include_str!("../data/embedding_reference.json"))
            .expect("the reference");
    let model = LocalEmbedder::load(&dir).expect("the model loads");
    assert_eq!(model.model(), "all-MiniLM-L6-v2");
    let texts: Vec<String> = reference.sentences.iter().map(|s| s.text.clone()).collect();
    // In one padded batch: the pads must not move the vectors.
    let vectors = Embeddings::new(model.clone())
        .embed(&texts)
        .await
        .expect("embedded");
    for (sentence, vector) in reference.sentences.iter().zip(&vectors) {
        assert_eq!(vector.len(), 384);
        for (at, (want, got)) in sentence
            .first_components
            .iter()
            .zip(vector.iter())
            .enumerate()
        {
            assert!(
                (want - got).abs() < 1e-3,
                "{:?}: component {at} is {got}, the reference {want}",
                sentence.text
            );
        }
    }
    for (i, row) in reference.cosine.iter().enumerate() {
        for (j, want) in row.iter().enumerate() {
            let got: f32 = vectors[i]
                .iter()
                .zip(vectors[j].iter())
                .map(|(a, b)| a * b)
                .sum();
            assert!(
                (want - got).abs() < 1e-3,
                "cosine of {:?} and {:?} is {got}, the reference {want}",
                texts[i],
                texts[j]
            );
        }
    }
    // One at a time, the same vectors as in the batch.
    let alone = model.embed(&texts[..1]).await.expect("embedded");
    let norm: f32 = alone[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    let cos: f32 = alone[0]
        .iter()
        .zip(vectors[0].iter())
        .map(|(a, b)| a * b / norm)
        .sum();
    assert!((cos - 1.0).abs() < 1e-4, "alone vs batched: {cos}");
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Path {
    /// The file's path.
    #[allow(dead_code)]
    path: String,
}

fn file_tool(
    name: &'static str,
    description: &'static str,
    annotations: ToolAnnotations,
) -> Toolbox {
    Toolbox::new().tool(
        tool::from_fn(name, |_: Path| async { Ok::<_, ToolError>("") })
            .with_description(description)
            .with_annotations(annotations),
    )
}

/// The filesystem server's read and write tools, as it describes them.
fn filesystem() -> Toolbox {
    Toolbox::new()
        .merge(file_tool(
            "write_file",
            "Create a new file or completely overwrite an existing file with new content.",
            ToolAnnotations::new().destructive(true),
        ))
        .merge(file_tool(
            "edit_file",
            "Make line-based edits to a text file.",
            ToolAnnotations::new().destructive(true),
        ))
        .merge(file_tool(
            "read_text_file",
            "Read the complete contents of a file from the file system as text.",
            ToolAnnotations::new().read_only(),
        ))
        .merge(file_tool(
            "list_directory",
            "Get a detailed listing of all files and directories in a specified path.",
            ToolAnnotations::new().read_only(),
        ))
        .deferred()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_finds_the_reader_first() {
    let Some(dir) = model_dir() else { return };
    let embeddings = Embeddings::new(LocalEmbedder::load(&dir).expect("loads"));
    let search = ToolSearch::hybrid(&filesystem(), &embeddings).await;
    assert!(search.ranks_by_meaning());
    let found = search
        .find(
            "read the contents of a text file",
            &http::Extensions::new(),
            3,
        )
        .await;
    assert_eq!(found.ranking, Ranking::Hybrid);
    assert_eq!(found.tools[0].name(), "read_text_file");
    // A request no tool serves finds nothing above the threshold.
    let strict = search.clone().min_similarity(0.3);
    let none = strict
        .find(
            "book a table for two at an Italian restaurant",
            &http::Extensions::new(),
            3,
        )
        .await;
    assert!(none.tools.is_empty(), "{:?}", none.tools);
    assert_eq!(none.closest.len(), 3);
}
