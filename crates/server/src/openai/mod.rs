//! OpenAI's wire format: request bodies ([`request`]) and responses ([`response`]).

pub mod request;
pub mod response;
