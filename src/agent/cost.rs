//! What each tool call's result cost: the prompt tokens it added to the
//! model call that read it ([`ToolCost`]), attributed once that call has
//! reported its usage.

use crate::model::{Cost, Prices, ToolCall, Usage};

use super::event::ToolCost;

/// About how many bytes a token is, for a result whose tokens cannot be
/// measured (as the budget layer of `toolstack-layers` counts them).
const BYTES_PER_TOKEN: u64 = 4;

/// The costs attributed so far, and what the next attribution needs.
#[derive(Debug, Default)]
pub(super) struct ToolCosts {
    done: Vec<ToolCost>,
    /// The last step's results, waiting for the model call that reads them.
    pending: Option<UnreadResults>,
    /// The usage the current model turn reported, if any.
    turn: Option<Usage>,
    /// The model that answered the current turn, as it named itself.
    model: Option<String>,
}

/// A step's results, not read by a model call yet: each call and the
/// usage of the turn that asked for them.
#[derive(Debug)]
struct UnreadResults {
    /// Each call's id, tool and result length.
    calls: Vec<(String, String, usize)>,
    /// The usage of the model turn that asked for the calls.
    asked: Option<Usage>,
}

impl ToolCosts {
    /// A model turn (or a turn asked again) begins.
    pub(super) fn turn_started(&mut self) {
        self.turn = None;
        self.model = None;
    }

    /// The turn reported `usage`.
    pub(super) fn usage(&mut self, usage: Usage) {
        *self.turn.get_or_insert_with(Usage::default) += usage;
    }

    /// The turn is answered by `model`.
    pub(super) fn model(&mut self, model: &str) {
        self.model = Some(model.to_owned());
    }

    /// The turn's answer is complete: the last step's results, which its
    /// prompt held, get their share of it — priced for `model` (the
    /// agent's request, unless the answer named another) when `prices`
    /// are given.
    pub(super) fn answered(&mut self, prices: Option<&Prices>, model: Option<&str>) {
        let Some(UnreadResults { calls, asked }) = self.pending.take() else {
            return;
        };
        let model = self.model.as_deref().or(model);
        let price = prices
            .zip(model)
            .and_then(|(p, m)| p.input_picos_per_token(m));
        let measured = asked.zip(self.turn).map(|(asked, read)| {
            // The prompt grew by the assistant's answer (its reasoning is
            // not in the history) and the step's results.
            let answer = asked
                .completion_tokens
                .saturating_sub(asked.reasoning_tokens);
            read.prompt_tokens
                .saturating_sub(asked.prompt_tokens)
                .saturating_sub(answer)
        });
        let total_bytes: u64 = calls.iter().map(|(_, _, bytes)| *bytes as u64).sum();
        let mut left = measured.unwrap_or(0);
        let last = calls.len().saturating_sub(1);
        for (i, (call_id, name, result_bytes)) in calls.into_iter().enumerate() {
            let bytes = result_bytes as u64;
            let tokens = match measured {
                // The remainder of the proportional split goes to the last,
                // so the shares add up to the growth.
                Some(_) if i == last => left,
                Some(growth) => {
                    let share = match total_bytes {
                        0 => growth / (last as u64 + 1),
                        total => mul_div(growth, bytes, total),
                    };
                    left -= share.min(left);
                    share.min(growth)
                }
                None => bytes.div_ceil(BYTES_PER_TOKEN),
            };
            let cost = price.map(|picos| {
                let nanos = (u128::from(tokens) * u128::from(picos)).div_ceil(1_000);
                Cost::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
            });
            tracing::info!(
                gen_ai.tool.call.id = %call_id,
                gen_ai.tool.name = %name,
                toolstack.tool.result_tokens = i64::try_from(tokens).unwrap_or(i64::MAX),
                toolstack.tool.cost_usd = cost.map(|c| c.as_nanos() as f64 / 1e9),
                toolstack.tool.cost_measured = measured.is_some(),
                "tool result cost"
            );
            self.done.push(ToolCost {
                call_id,
                name,
                result_bytes,
                tokens,
                cost,
                measured: measured.is_some(),
            });
        }
    }

    /// A step ran `calls`, whose results (`texts`) the next model call
    /// reads.
    pub(super) fn step_ran(&mut self, calls: &[ToolCall], lengths: impl Iterator<Item = usize>) {
        let calls = calls
            .iter()
            .zip(lengths)
            .map(|(call, length)| (call.id.clone(), call.name.clone(), length))
            .collect();
        self.pending = Some(UnreadResults {
            calls,
            asked: self.turn,
        });
    }

    /// The costs attributed, in the order the results were read.
    pub(super) fn into_costs(self) -> Vec<ToolCost> {
        self.done
    }
}

/// `a * b / c`, rounded down, without overflow (`c` is not 0).
fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    u64::try_from(u128::from(a) * u128::from(b) / u128::from(c)).unwrap_or(u64::MAX)
}
