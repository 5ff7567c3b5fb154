//! A configuration value the node cannot use, named by its field.

/// A field of the configuration (`evictionHard.memory.available`,
/// `imageGCHighThresholdPercent`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// The field.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl FieldError {
    /// Field `field` is wrong for `message`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}
