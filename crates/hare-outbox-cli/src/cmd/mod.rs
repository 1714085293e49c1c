//! One module per subcommand. Each imports from `args`, `ui`, `db`, `config` and `error`, never
//! from another command.

pub mod backlog;
pub mod capture;
pub mod cleanup;
pub mod dead_letters;
pub mod demo;
pub mod events;
pub mod keys;
pub mod migrate;
pub mod relay;
pub mod schema;
pub mod serve;
