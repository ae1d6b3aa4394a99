//! Fuzzes the JetStream API request decoders with arbitrary bodies: stream
//! configs (create and update, then the update rules and the JSON written
//! back), and every other request body. Never panic; an accepted config
//! survives its stored JSON form and is equal to itself after it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_broker::jetstream::api::requests;
use tern_broker::jetstream::stream::config as stream_config;

fuzz_target!(|data: &[u8]| {
    for create in [true, false] {
        if let Ok(config) = stream_config::parse("FUZZ", data, create) {
            let mut out = String::new();
            config.write_json(&mut out, true);
            let stored = config.to_stored_json();
            let back = stream_config::StreamConfig::from_stored_json(stored.as_bytes())
                .expect("a stored config reads back");
            assert!(back.same_as(&config), "stored JSON round trip");
            let _ = stream_config::check_update(&config, &back, false);
        }
    }
    let _ = requests::StreamInfoRequest::parse(data);
    let _ = requests::PurgeRequest::parse(data);
    let _ = requests::MessageDeleteRequest::parse(data);
    let _ = requests::parse_message_get(data);
    let _ = requests::DirectGet::parse(data);
    let _ = requests::DirectGet::parse_subject_form(b"a.b", data);
    let _ = requests::NamesRequest::parse(data);
    let _ = requests::NamesRequest::parse_list(data);
});
