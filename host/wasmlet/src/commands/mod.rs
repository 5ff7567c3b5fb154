//! One module per subcommand.

pub mod agent;
pub mod cri;
pub mod plugin;
