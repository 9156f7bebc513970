//! What a strategy that replaces older messages by one note plans, and the notes it leaves.

use crate::model::Message;

use super::estimate::estimate_tokens;

/// What a strategy that replaces older messages by one note does to a
/// history: where the kept tail starts (`cut`), which messages before it
/// go (all but the system messages and the first user message), and how
/// many messages the note stands for (an earlier note counting for the
/// messages it stood for).
pub(super) struct Plan {
    pub(super) cut: usize,
    pub(super) removed: Vec<bool>,
    pub(super) stands_for: usize,
}

impl Plan {
    /// The plan that keeps the last `keep_turns` turns and the latest user
    /// message; `None` when it would remove nothing.
    pub(super) fn new(messages: &[Message], keep_turns: usize) -> Option<Plan> {
        let first = first_user(messages);
        let mut cut = turns_start(messages, keep_turns);
        if let Some(latest) = latest_user(messages) {
            // The first user message stays anyway.
            if latest < cut && Some(latest) != first {
                cut = latest;
            }
        }
        let removed: Vec<bool> = messages[..cut]
            .iter()
            .enumerate()
            .map(|(i, m)| !matches!(m, Message::System { .. }) && Some(i) != first)
            .collect();
        let stands_for = messages[..cut]
            .iter()
            .zip(&removed)
            .filter(|(_, removed)| **removed)
            .map(|(m, _)| note_stands_for(m).unwrap_or(1))
            .sum();
        (stands_for > 0).then_some(Plan {
            cut,
            removed,
            stands_for,
        })
    }

    /// The history with the removed messages replaced by `note`, where the
    /// first of them was.
    pub(super) fn assemble(&self, messages: &[Message], note: Message) -> Vec<Message> {
        let kept = self.removed.iter().filter(|r| !**r).count();
        let mut out = Vec::with_capacity(kept + 1 + messages.len() - self.cut);
        let mut note = Some(note);
        for (message, removed) in messages[..self.cut].iter().zip(&self.removed) {
            if *removed {
                out.extend(note.take());
            } else {
                out.push(message.clone());
            }
        }
        out.extend_from_slice(&messages[self.cut..]);
        out
    }
}

/// `compacted` if it is estimated smaller than `messages`.
pub(super) fn smaller(messages: &[Message], compacted: Vec<Message>) -> Option<Vec<Message>> {
    (estimate_tokens(&compacted) < estimate_tokens(messages)).then_some(compacted)
}

/// Where the last `keep_turns` turns start: the index of the
/// `keep_turns`-th last assistant message; the end when `keep_turns` is
/// 0, the start when there are fewer turns.
pub(super) fn turns_start(messages: &[Message], keep_turns: usize) -> usize {
    let Some(nth) = keep_turns.checked_sub(1) else {
        return messages.len();
    };
    messages
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, m)| matches!(m, Message::Assistant { .. }))
        .nth(nth)
        .map_or(0, |(i, _)| i)
}

pub(super) fn is_user(message: &Message) -> bool {
    matches!(message, Message::User { .. }) && note_stands_for(message).is_none()
}

/// The first user message that is not a compaction's note.
pub(super) fn first_user(messages: &[Message]) -> Option<usize> {
    messages.iter().position(is_user)
}

/// The latest user message that is not a compaction's note.
pub(super) fn latest_user(messages: &[Message]) -> Option<usize> {
    messages.iter().rposition(is_user)
}

pub(super) fn removed_note(n: usize) -> String {
    match n {
        1 => "[1 earlier message was removed to save context]".to_owned(),
        n => format!("[{n} earlier messages were removed to save context]"),
    }
}

pub(super) fn summary_header(n: usize) -> String {
    match n {
        1 => "[summary of 1 earlier message]".to_owned(),
        n => format!("[summary of {n} earlier messages]"),
    }
}

/// Whether `message` is a note a compaction put in (a removal note or a
/// summary), not something the user said.
pub fn is_note(message: &Message) -> bool {
    note_stands_for(message).is_some()
}

/// How many messages `message` stands for, if it is a compaction's note:
/// a removal note (all of it) or a summary (its first line).
pub(super) fn note_stands_for(message: &Message) -> Option<usize> {
    let Message::User { content } = message else {
        return None;
    };
    let (n, rest) = match content.strip_prefix("[summary of ") {
        Some(summary) => {
            let (n, rest) = leading_number(summary)?;
            let header = rest.split_once('\n').map_or(rest, |(header, _)| header);
            (n, header)
        }
        None => leading_number(content.strip_prefix('[')?)?,
    };
    let expected = match (content.starts_with("[summary of "), n) {
        (true, 1) => " earlier message]",
        (true, _) => " earlier messages]",
        (false, 1) => " earlier message was removed to save context]",
        (false, _) => " earlier messages were removed to save context]",
    };
    (rest == expected).then_some(n)
}

pub(super) fn leading_number(text: &str) -> Option<(usize, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let n = text[..digits].parse().ok()?;
    Some((n, &text[digits..]))
}
