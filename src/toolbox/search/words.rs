//! The ranking by words: BM25 (the `bm25` crate's scorer) over each
//! tool's indexed text, with our own small tokenizer — words split at
//! punctuation, `snake_case` and `camelCase`, English stop words dropped,
//! each word stemmed (Snowball's English stemmer) — and a query's words
//! widened by a table of the words tool descriptions and people use for
//! the same thing (`delete` finds `remove`, `bug` finds `issue`, `rain`
//! finds `forecast`).

use std::collections::HashSet;
use std::sync::OnceLock;

use bm25::{
    Embedder, EmbedderBuilder, Embedding, Scorer, TokenEmbedder, TokenEmbedding, Tokenizer,
};
use rust_stemmers::{Algorithm, Stemmer};

/// The most distinct words of a query that are scored.
const MAX_QUERY_WORDS: usize = 32;

/// The BM25 index of a search's tools, by their position in the toolbox.
pub(super) struct WordIndex {
    scorer: Scorer<usize, u32>,
}

impl WordIndex {
    /// An index of `documents` (a tool's position and indexed text).
    pub(super) fn new(documents: &[(usize, String)]) -> Self {
        let corpus: Vec<&str> = documents.iter().map(|(_, text)| text.as_str()).collect();
        let embedder: Embedder<u32, Words> =
            EmbedderBuilder::with_tokenizer_and_fit_to_corpus(Words::new(), &corpus).build();
        let mut scorer = Scorer::new();
        for (at, text) in documents {
            scorer.upsert(at, embedder.embed(text));
        }
        WordIndex { scorer }
    }

    /// The tools that share a word (or a synonym of one) with `query`, by
    /// position, best first; equal scores in the toolbox's order.
    pub(super) fn rank(&self, query: &str) -> Vec<(usize, f32)> {
        let embedding = Words::new().query(query);
        if embedding.is_empty() {
            return Vec::new();
        }
        let mut matches = self.scorer.matches(&embedding);
        matches.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        matches.into_iter().map(|m| (m.id, m.score)).collect()
    }
}

/// Our tokenizer: words split at punctuation, `snake_case` and
/// `camelCase`, lowercased, English stop words dropped, stemmed.
#[derive(Clone, Copy, Default)]
struct Words;

impl Words {
    fn new() -> Self {
        Words
    }

    fn each(self, text: &str, mut f: impl FnMut(String)) {
        let stemmer = Stemmer::create(Algorithm::English);
        for word in split(text) {
            if word.len() < 2 || STOP_WORDS.contains(&word.as_str()) {
                continue;
            }
            f(stemmer.stem(&word).into_owned());
        }
    }

    /// A query's distinct words, each widened by its synonyms, as the
    /// scorer takes them (only which words: a query's own counts do not
    /// weigh).
    fn query(self, text: &str) -> Embedding<u32> {
        let mut seen = HashSet::new();
        let mut words = Vec::new();
        self.each(text, |word| {
            if seen.len() < MAX_QUERY_WORDS && seen.insert(word.clone()) {
                words.push(word);
            }
        });
        for word in words.clone() {
            for synonym in synonyms(&word) {
                if seen.insert(synonym.to_owned()) {
                    words.push(synonym.to_owned());
                }
            }
        }
        Embedding(
            words
                .iter()
                .map(|word| TokenEmbedding {
                    index: u32::embed(word),
                    value: 1.0,
                })
                .collect(),
        )
    }
}

impl Tokenizer for Words {
    fn tokenize(&self, text: &str) -> Vec<String> {
        let mut words = Vec::new();
        self.each(text, |word| words.push(word));
        words
    }
}

/// `text`'s words, lowercased: split at anything but letters and digits,
/// and where a lowercase letter is followed by an uppercase one.
fn split(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .flat_map(|piece| {
            let mut words = Vec::new();
            let mut start = 0;
            let mut previous_lower = false;
            for (at, c) in piece.char_indices() {
                if c.is_uppercase() && previous_lower {
                    words.push(&piece[start..at]);
                    start = at;
                }
                previous_lower = c.is_lowercase() || c.is_ascii_digit();
            }
            words.push(&piece[start..]);
            words
        })
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
}

/// Words too common to tell tools apart.
const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "all", "am", "an", "and", "any", "are", "as", "at", "be", "been",
    "before", "but", "by", "can", "could", "did", "do", "does", "for", "from", "had", "has",
    "have", "he", "her", "here", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its",
    "just", "me", "my", "need", "no", "not", "now", "of", "on", "or", "our", "out", "please",
    "she", "should", "so", "some", "than", "that", "the", "their", "them", "then", "there",
    "these", "they", "this", "those", "to", "up", "us", "use", "want", "was", "we", "were", "what",
    "when", "where", "which", "who", "whom", "why", "will", "with", "would", "you", "your",
];

/// Groups of words that tool descriptions and the people asking for tools
/// use for the same thing (or for things found together: `rain` and
/// `forecast`). A query's word adds the others of its groups. Written from
/// half of the benchmark's queries; the other half measures how far it
/// carries (docs/benchmarks.md).
const SYNONYMS: &[&[&str]] = &[
    &["create", "make", "new", "add", "file"],
    &[
        "delete", "remove", "erase", "destroy", "drop", "trash", "wipe", "clear",
    ],
    &["list", "show", "enumerate"],
    &[
        "get", "fetch", "retrieve", "read", "view", "lookup", "open", "contents",
    ],
    &["search", "find", "query", "lookup", "look"],
    &["update", "edit", "modify", "change", "set"],
    &["send", "post", "notify", "dm"],
    &[
        "message",
        "msg",
        "chat",
        "said",
        "say",
        "mention",
        "conversation",
        "discuss",
    ],
    &["bug", "issue", "ticket", "defect"],
    &["document", "doc", "docs"],
    &["folder", "directory", "dir", "mkdir"],
    &["meeting", "event", "appointment"],
    &["user", "member", "person", "people"],
    &["image", "picture", "photo", "screenshot"],
    &["run", "execute", "exec", "invoke", "trigger"],
    &["stop", "halt", "kill", "terminate", "cancel"],
    &["deploy", "release", "rollout", "ship"],
    &["schedule", "book", "reserve"],
    &["upload", "store"],
    &["charge", "payment", "pay", "billed", "money"],
    &["refund", "back", "return"],
    &["directions", "route", "navigate", "way", "travel"],
    &[
        "incident", "outage", "alert", "page", "paging", "firing", "oncall",
    ],
    &["pr", "pull"],
    &["repo", "repository"],
    &["comment", "reply", "respond", "note"],
    &["close", "resolve"],
    &["spreadsheet", "sheet", "excel", "tracker"],
    &["row", "line", "entry", "record"],
    &["append", "bottom", "end"],
    &["container", "docker"],
    &["pod", "kubernetes", "k8s", "cluster"],
    &["server", "instance", "vm", "machine"],
    &["convert", "conversion", "exchange"],
    &[
        "calculate",
        "compute",
        "math",
        "evaluate",
        "expression",
        "percent",
        "arithmetic",
    ],
    &[
        "weather",
        "forecast",
        "temperature",
        "rain",
        "snow",
        "sunny",
        "hot",
        "cold",
        "warm",
        "wind",
        "humid",
        "jacket",
        "umbrella",
    ],
    &[
        "warning",
        "alert",
        "advisory",
        "tornado",
        "storm",
        "hurricane",
        "flood",
    ],
    &[
        "unit",
        "units",
        "fahrenheit",
        "celsius",
        "feet",
        "meters",
        "miles",
        "kilometers",
        "inches",
        "pounds",
        "kilograms",
        "kg",
    ],
    &[
        "currency", "euro", "euros", "dollar", "dollars", "usd", "eur", "jpy", "gbp", "yen",
        "pound",
    ],
    &["elevation", "altitude", "height", "high", "sea"],
    &["duration", "days", "weeks", "months", "later", "ago"],
    &["time", "timezone", "clock", "hour"],
    &["share", "access", "permission", "grant", "invite"],
    &["replace", "substitute", "swap"],
    &["database", "db", "sql"],
    &["call", "ring", "phone", "dial", "voice"],
    &["sms", "text"],
    &["log", "logs"],
    &["worklog", "hours", "timesheet", "spent"],
    &["macro", "macros", "canned", "template", "snippet"],
    &["monitor", "threshold", "watch"],
    &["assign", "give", "owner", "assignee"],
    &["latency", "metric", "metrics", "p99", "cpu", "memory"],
    &[
        "translate",
        "translation",
        "language",
        "german",
        "french",
        "spanish",
        "english",
    ],
    &[
        "geocode",
        "coordinates",
        "lat",
        "latitude",
        "longitude",
        "address",
    ],
    &["news", "headlines"],
    &["video", "youtube", "tutorial"],
    &["discount", "promo", "coupon"],
    &["product", "catalog", "item"],
    &["quote", "price", "pricing"],
    &["ack", "acknowledge"],
    &["mute", "silence", "snooze", "quiet"],
];

/// The synonyms of a (stemmed) word, stemmed.
fn synonyms(word: &str) -> impl Iterator<Item = &'static str> + '_ {
    static STEMMED: OnceLock<Vec<Vec<String>>> = OnceLock::new();
    let groups = STEMMED.get_or_init(|| {
        let stemmer = Stemmer::create(Algorithm::English);
        SYNONYMS
            .iter()
            .map(|group| group.iter().map(|w| stemmer.stem(w).into_owned()).collect())
            .collect()
    });
    groups
        .iter()
        .filter(move |group| group.iter().any(|w| w == word))
        .flat_map(|group| group.iter().map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_at_case_and_punctuation_and_are_stemmed() {
        let words = Words::new().tokenize("github_createIssue: Creates issues in the repos");
        assert_eq!(words, ["github", "creat", "issu", "creat", "issu", "repo"]);
    }

    #[test]
    fn a_query_is_widened_by_synonyms_once() {
        let query = Words::new().query("remove remove the file");
        let remove = u32::embed("remov");
        let delete = u32::embed("delet");
        assert_eq!(query.iter().filter(|t| t.index == remove).count(), 1);
        assert!(query.iter().any(|t| t.index == delete));
    }
}
