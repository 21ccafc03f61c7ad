// SPDX-License-Identifier: Apache-2.0
//! The crate's error type.

use std::fmt;

/// Why a call was refused: an invalid identity or another invalid argument.
/// `field` is the dotted path the C++ library names ("kv.num_kv_heads",
/// "tenant", "tenant_secret", "extras").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The identity (or the tenant secret) is invalid.
    Identity {
        /// The offending field's dotted path.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// Another argument is invalid.
    Input {
        /// The offending field's dotted path.
        field: String,
        /// What is wrong.
        message: String,
    },
}

impl Error {
    /// "identity_error" or "input_error", as the conformance protocol names them.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Identity { .. } => "identity_error",
            Error::Input { .. } => "input_error",
        }
    }

    /// The dotted path of the offending field.
    pub fn field(&self) -> &str {
        match self {
            Error::Identity { field, .. } | Error::Input { field, .. } => field,
        }
    }

    /// What is wrong, for people.
    pub fn message(&self) -> &str {
        match self {
            Error::Identity { message, .. } | Error::Input { message, .. } => message,
        }
    }

    pub(crate) fn identity(field: &'static str, message: impl Into<String>) -> Self {
        Error::Identity { field: field.into(), message: message.into() }
    }

    pub(crate) fn input(field: &'static str, message: impl Into<String>) -> Self {
        Error::Input { field: field.into(), message: message.into() }
    }

    pub(crate) fn input_owned(field: String, message: String) -> Self {
        Error::Input { field, message }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kvkey.{}: {}: {}", self.kind(), self.field(), self.message())
    }
}

impl std::error::Error for Error {}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
