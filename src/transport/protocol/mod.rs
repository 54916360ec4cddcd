//! The protocol: what is asked of a node ([`request::Request`]), the keys
//! it touches, the scripts and commands that carry it, and how a reply
//! reads as a vote.
//!
//! Pure data and encoding: no connection, no thread, no shared state.

pub(crate) mod codec;
pub(crate) mod hash_slot;
pub(crate) mod inspect;
pub(crate) mod keys;
pub(crate) mod kind;
pub(crate) mod request;
pub(crate) mod scripts;
#[cfg(test)]
mod tests;
pub(crate) mod token;
