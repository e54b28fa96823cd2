//! `requestState` verification (`era::mrtr::StateSigner::verify`): a 2026 client hands the
//! bridge back a state it may have altered, or one it made up.
//!
//! Input: byte 0 picks the mode; then text split at `\0` into the state (or the edit), the
//! principal, the method and the params.
//!
//! Invariants: a state this signer made verifies with the same binding and gives back its
//! park id and round; with another principal, method or params digest it is refused; any
//! other string (a made-up one, or a signed one with one byte changed) is refused — what
//! verify accepts was signed by the key.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use mcp_bridge::era::mrtr::{params_digest, StateClaims, StateError, StateSigner};
use serde_json::value::RawValue;

const KEY: [u8; 32] = *b"fuzz requestState key, 32 bytes!";

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let mut parts = text.splitn(4, '\0');
    let (edit, principal, method, params) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or("anonymous"),
        parts.next().unwrap_or("tools/call"),
        parts.next().unwrap_or("{}"),
    );
    let params = serde_json::from_str::<&RawValue>(params).ok();
    let digest = params_digest(params);
    let signer = StateSigner::with_key(KEY);
    let park = u64::from(sel) * 0x0101_0101_0101;
    let round = u32::from(sel >> 3);

    // Made up: never accepted (it would be a forgery).
    if let Ok(c) = signer.verify(edit, principal, method, &digest) {
        panic!("a state the signer never made was accepted: {edit:?} -> {c:?}");
    }

    let state = signer.sign(
        park,
        round,
        Duration::from_secs(300),
        principal,
        method,
        &digest,
    );
    assert!(signer.is_ours(&state));
    assert_eq!(
        signer.verify(&state, principal, method, &digest),
        Ok(StateClaims { park, round })
    );
    // Bound to the caller, the method and the arguments.
    let other = format!("{principal}x");
    assert_eq!(
        signer.verify(&state, &other, method, &digest),
        Err(StateError::Mismatch)
    );
    // (a digest is hex, so "x" is never one)
    assert_eq!(
        signer.verify(&state, principal, method, "x"),
        Err(StateError::Mismatch)
    );
    assert_eq!(
        signer
            .verify(&state, principal, "other/method", &digest)
            .is_ok(),
        method == "other/method"
    );
    // Another key refuses it.
    let mut k2 = KEY;
    k2[0] ^= 1;
    assert!(StateSigner::with_key(k2)
        .verify(&state, principal, method, &digest)
        .is_err());

    // One byte changed (at a place and to a value the input picks): refused unless unchanged.
    let mut bytes = state.clone().into_bytes();
    if !edit.is_empty() {
        let at = usize::from(edit.as_bytes()[0]) % bytes.len();
        let to = edit.as_bytes().get(1).copied().unwrap_or(b'A');
        bytes[at] = to;
        if let Ok(s) = String::from_utf8(bytes) {
            if s != state {
                if let Ok(c) = signer.verify(&s, principal, method, &digest) {
                    panic!("an altered state was accepted: {s:?} -> {c:?}");
                }
            }
        }
    }
});
