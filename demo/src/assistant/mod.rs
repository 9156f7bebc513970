//! The assistant example's own pieces (`examples/assistant.rs`), so that
//! the example shows toolstack and little else: an in-memory SQLite
//! database and its three tools (search the schema, show a table, execute
//! SQL with its rows streamed and progress reported), the scripted model's
//! turns (and, for the web page, the same script paced like a real
//! model), and the terminal: the person asked to approve a write, and the
//! run's events printed as they come.
//!
//! | file | what |
//! |---|---|
//! | `database.rs` | the database and its three tools |
//! | `approve.rs` | who approves a write: nobody, or the person at the terminal |
//! | `script.rs` | the scripted model, and the same script paced for the web page |
//! | `console.rs` | the terminal: events printed, writes asked about |

mod approve;
mod console;
mod database;
mod script;

pub use approve::{nobody_to_ask, terminal_approver, Ask};
pub use console::Console;
pub use database::{database, execute_sql_tool, search_schema_tool, show_table_tool, writes, Db};
pub use script::{script, turns, PacedScript};
