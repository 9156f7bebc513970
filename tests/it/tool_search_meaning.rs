//! Tool search by meaning beside words, with an embedder written for the
//! test (texts as counts of a few concepts' words): the two rankings
//! fused, tool vectors cached by text across rebuilds, words alone when
//! the embedder fails (never a failed search), the no-match threshold, and
//! what the model reads of a search's result.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use futures_util::StreamExt;
use http::Extensions;
use toolstack::agent::{Agent, AgentEvent, SEARCH_TOOLS};
use toolstack::embed::{Embed, EmbedError, EmbedFuture, Embeddings};
use toolstack::model::{Message, ScriptedModel, Turn};
use toolstack::toolbox::{Ranking, ToolSearch};
use toolstack::{tool, ToolAnnotations, ToolError, Toolbox};

/// Each dimension a concept, with the words that mean it.
const CONCEPTS: &[&[&str]] = &[
    &["read", "contents", "inside", "show", "txt", "open"],
    &["write", "overwrite", "save", "create"],
    &["message", "chat", "tell", "slack"],
    &["weather", "forecast", "rain", "coat"],
    &["restaurant", "table", "dinner"],
];

#[derive(Default)]
struct Concepts {
    texts: AtomicUsize,
    broken: AtomicBool,
}

impl Embed for Concepts {
    fn model(&self) -> &str {
        "concepts"
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> EmbedFuture<'a> {
        self.texts.fetch_add(texts.len(), Ordering::SeqCst);
        let broken = self.broken.load(Ordering::SeqCst);
        Box::pin(async move {
            if broken {
                return Err(EmbedError::Failed("the model is down".into()));
            }
            Ok(texts
                .iter()
                .map(|text| {
                    let text = text.to_lowercase();
                    let mut v: Vec<f32> = CONCEPTS
                        .iter()
                        .map(|words| words.iter().filter(|w| text.contains(*w)).count() as f32)
                        .collect();
                    // A little of everything: never a zero vector.
                    v.push(0.1);
                    v
                })
                .collect())
        })
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Path {
    path: String,
}

fn file_tool(
    name: &'static str,
    description: &'static str,
    annotations: ToolAnnotations,
) -> Toolbox {
    Toolbox::new().tool(
        tool::from_fn(name, |_: Path| async { Ok::<_, ToolError>("done") })
            .with_description(description)
            .with_annotations(annotations),
    )
}

fn tools() -> Toolbox {
    Toolbox::new()
        .merge(file_tool(
            "write_file",
            "Create a new file or overwrite an existing file.",
            ToolAnnotations::new().destructive(true),
        ))
        .merge(file_tool(
            "read_text_file",
            "Read the complete contents of a file as text.",
            ToolAnnotations::new().read_only(),
        ))
        .merge(file_tool(
            "post_message",
            "Post a message to a Slack channel.",
            ToolAnnotations::new(),
        ))
        .merge(file_tool(
            "get_forecast",
            "Get the weather forecast for a city.",
            ToolAnnotations::new().read_only(),
        ))
        .deferred()
}

fn concepts() -> (Arc<Concepts>, Embeddings) {
    let concepts = Arc::new(Concepts::default());
    (
        Arc::clone(&concepts),
        Embeddings::new(Arc::clone(&concepts)),
    )
}

#[tokio::test]
async fn meaning_finds_what_shares_no_word_and_fuses_with_words() {
    let (_, embeddings) = concepts();
    let search = ToolSearch::hybrid(&tools(), &embeddings).await;
    let none = Extensions::new();
    // No word in common with the forecast tool: words alone miss it.
    let query = "should I bring a coat in Oslo";
    let by_words = ToolSearch::new(&tools());
    assert!(by_words.search(query, &none, 3).is_empty());
    assert_eq!(by_words.find(query, &none, 3).await.ranking, Ranking::Words);
    let found = search.find(query, &none, 3).await;
    assert_eq!(found.ranking, Ranking::Hybrid);
    assert_eq!(found.tools[0].name(), "get_forecast");
    // Words and meaning agree: first either way.
    let found = search.find("show what is inside notes.txt", &none, 2).await;
    assert_eq!(found.tools[0].name(), "read_text_file");
    // Fused: a tool first by words and by meaning beats one first by
    // meaning alone.
    let found = search.find("write a file", &none, 4).await;
    assert_eq!(found.tools[0].name(), "write_file");
}

#[tokio::test]
async fn a_rebuilt_search_embeds_only_the_tools_whose_text_changed() {
    let (concepts, embeddings) = concepts();
    ToolSearch::hybrid(&tools(), &embeddings).await;
    assert_eq!(concepts.texts.load(Ordering::SeqCst), 4);
    // An MCP server's tools changed: one new tool, the others as they were.
    let more = tools().merge(
        file_tool(
            "book_table",
            "Book a table at a restaurant.",
            ToolAnnotations::new(),
        )
        .deferred(),
    );
    let search = ToolSearch::hybrid(&more, &embeddings).await;
    assert_eq!(
        concepts.texts.load(Ordering::SeqCst),
        5,
        "one more text, not five"
    );
    assert_eq!(search.len(), 5);
    let found = search.find("dinner for two", &Extensions::new(), 1).await;
    assert_eq!(found.tools[0].name(), "book_table");
}

#[tokio::test]
async fn a_failing_embedder_leaves_the_words_and_says_so() {
    let (concepts, embeddings) = concepts();
    let search = ToolSearch::hybrid(&tools(), &embeddings).await;
    concepts.broken.store(true, Ordering::SeqCst);
    let found = search.find("read a file", &Extensions::new(), 2).await;
    assert_eq!(found.tools[0].name(), "read_text_file");
    assert!(
        matches!(&found.ranking, Ranking::WordsAfter(EmbedError::Failed(why)) if why.contains("down")),
        "{:?}",
        found.ranking
    );
    // Broken from the start: a search by words, that says why.
    let (concepts, embeddings) = self::concepts();
    concepts.broken.store(true, Ordering::SeqCst);
    let search = ToolSearch::hybrid(&tools(), &embeddings).await;
    assert!(!search.ranks_by_meaning());
    let found = search.find("read a file", &Extensions::new(), 2).await;
    assert_eq!(found.tools[0].name(), "read_text_file");
    assert!(matches!(found.ranking, Ranking::WordsAfter(_)));
}

#[tokio::test]
async fn below_the_threshold_nothing_fits_and_the_closest_are_named() {
    let (_, embeddings) = concepts();
    let search = ToolSearch::hybrid(&tools(), &embeddings)
        .await
        .min_similarity(0.5);
    let found = search
        .find("book a table for dinner", &Extensions::new(), 3)
        .await;
    assert!(found.tools.is_empty(), "{:?}", found.tools);
    assert_eq!(found.closest.len(), 3);
    let found = search
        .find("will it rain tomorrow", &Extensions::new(), 3)
        .await;
    assert_eq!(found.tools[0].name(), "get_forecast");
}

/// The text of the search's tool message in a run whose model searches
/// once for `query`.
async fn search_result(search: ToolSearch, query: &str) -> String {
    let model = ScriptedModel::new([
        Turn::new().tool_call(
            SEARCH_TOOLS,
            serde_json::json!({"query": query}).to_string(),
        ),
        Turn::new().text("done"),
    ]);
    let agent = Agent::new(model, tools()).tool_search(search);
    let mut events = agent.run(vec![Message::user("go")]);
    while let Some(event) = events.next().await {
        if let AgentEvent::ToolResult { result, .. } = event {
            return result.into_text();
        }
    }
    panic!("no search result");
}

#[tokio::test]
async fn the_model_reads_what_each_tool_found_does_to_the_world() {
    let (_, embeddings) = concepts();
    let search = ToolSearch::hybrid(&tools(), &embeddings).await;
    let text = search_result(search.clone(), "read or overwrite a file").await;
    assert!(
        text.contains("- read_text_file (reads only): Read the complete"),
        "{text}"
    );
    assert!(
        text.contains("- write_file (may write and delete): "),
        "{text}"
    );
    let none = search_result(search.min_similarity(0.5), "book a table for dinner").await;
    assert!(
        none.contains("no tool fits `book a table for dinner` (the closest are "),
        "{none}"
    );
}

/// Nested as an MCP server's tools would be: `files_…`, `chat_…`.
fn servers() -> Toolbox {
    let files = Toolbox::new()
        .merge(file_tool(
            "read",
            "Read a file.",
            ToolAnnotations::new().read_only(),
        ))
        .merge(file_tool("write", "Write a file.", ToolAnnotations::new()));
    let chat = Toolbox::new().merge(file_tool("post", "Post a message.", ToolAnnotations::new()));
    Toolbox::new()
        .merge(file_tool(
            "get_forecast",
            "Get the weather forecast.",
            ToolAnnotations::new(),
        ))
        .nest_with("files", '_', files)
        .nest_with("chat", '_', chat)
        .deferred()
}

#[tokio::test]
async fn with_names_in_view_the_model_loads_a_tool_by_its_exact_name() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let model = ScriptedModel::new([
        Turn::new().tool_call(SEARCH_TOOLS, r#"{"query": "files_read, chat_post"}"#),
        Turn::new().text("done"),
    ]);
    let recorded = Arc::clone(&seen);
    let model = tower::ServiceBuilder::new()
        .map_request(move |request: toolstack::model::ChatRequest| {
            recorded.lock().unwrap().push(request.clone());
            request
        })
        .service(model);
    let agent = Agent::new(model, servers()).deferred_names_in_view(true);
    let mut events = agent.run(vec![Message::user("go")]);
    let mut result = String::new();
    while let Some(event) = events.next().await {
        if let AgentEvent::ToolResult { result: r, .. } = event {
            result = r.into_text();
        }
    }
    let seen = seen.lock().unwrap().clone();
    let search = seen[0]
        .tools
        .iter()
        .find(|t| t.name() == SEARCH_TOOLS)
        .expect("shown");
    let description = search.description().unwrap();
    assert!(
        description.contains("\n- files: files_read, files_write"),
        "{description}"
    );
    assert!(
        description.contains("\n- other: get_forecast, chat_post"),
        "{description}"
    );
    // Loaded by name, exactly those two, and shown with their schemas next.
    assert!(result.starts_with("2 tools found and loaded"), "{result}");
    let next: Vec<&str> = seen[1].tools.iter().map(|t| t.name()).collect();
    assert!(
        next.contains(&"files_read") && next.contains(&"chat_post"),
        "{next:?}"
    );
    assert!(!next.contains(&"files_write"), "{next:?}");
    // The search takes exact names whatever the agent shows.
    let search = ToolSearch::new(&servers());
    assert_eq!(
        search.named("files_read", &Extensions::new(), 5).unwrap()[0].name(),
        "files_read"
    );
    assert!(search
        .named("files_read nonsense", &Extensions::new(), 5)
        .is_none());
    assert_eq!(
        search
            .find("files_write", &Extensions::new(), 5)
            .await
            .ranking,
        Ranking::Names
    );
}
