//! One module per subcommand.

pub mod agent;
pub mod controller;
pub mod cri;
pub mod plugin;
