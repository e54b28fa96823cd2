//! `WWW-Authenticate` parsing (RFC 9110 §11.6.1, RFC 6750 §3): the challenges a 401 or 403
//! carries, and the Bearer one's `resource_metadata`, `scope` and `error`. Hand-written because
//! no maintained crate parses the general challenge list (several challenges, quoted strings
//! with escapes, token68) without pulling in a web framework; it is small, bounded (the input
//! is cut at [`MAX_INPUT`] bytes and [`MAX_PARAMS`] parameters) and total: garbage yields
//! fewer challenges, never a panic.

/// Longest header value looked at.
pub const MAX_INPUT: usize = 8 * 1024;
/// Most parameters kept over all challenges.
pub const MAX_PARAMS: usize = 64;

/// One challenge: its scheme (as sent) and its parameters (names lower-cased).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub scheme: String,
    pub params: Vec<(String, String)>,
}

impl Challenge {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What a Bearer challenge tells an OAuth client.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bearer {
    pub resource_metadata: Option<String>,
    pub scope: Option<String>,
    pub error: Option<String>,
    /// The server challenged with the `DPoP` scheme too (or only): it takes DPoP-bound
    /// tokens (RFC 9449 §7.1).
    pub dpop: bool,
}

/// The OAuth challenge among `values` (each a `WWW-Authenticate` header value), if any: the
/// Bearer one, else a DPoP one (RFC 9449 §7.1: a server that takes only DPoP-bound tokens
/// challenges with the `DPoP` scheme and the same parameters).
pub fn bearer<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<Bearer> {
    let all: Vec<Challenge> = values.into_iter().flat_map(parse).collect();
    let of = |scheme: &str| all.iter().find(|c| c.scheme.eq_ignore_ascii_case(scheme));
    let dpop = of("dpop").is_some();
    of("bearer").or_else(|| of("dpop")).map(|c| Bearer {
        resource_metadata: c.param("resource_metadata").map(str::to_owned),
        scope: c.param("scope").map(str::to_owned),
        error: c.param("error").map(str::to_owned),
        dpop,
    })
}

fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }
    fn skip_ws_commas(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b',')) {
            self.i += 1;
        }
    }
    fn token(&mut self) -> &str {
        let start = self.i;
        while self.peek().is_some_and(is_tchar) {
            self.i += 1;
        }
        std::str::from_utf8(&self.s[start..self.i]).unwrap_or("")
    }
    /// A quoted string (the cursor on the opening quote); an unterminated one runs to the end.
    fn quoted(&mut self) -> String {
        self.i += 1;
        let mut out = Vec::new();
        while let Some(c) = self.peek() {
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    if let Some(n) = self.peek() {
                        out.push(n);
                        self.i += 1;
                    }
                }
                _ => out.push(c),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    /// Skip to the next comma (something that parses as nothing).
    fn skip_item(&mut self) {
        while self.peek().is_some_and(|c| c != b',') {
            self.i += 1;
        }
    }
}

/// All challenges in one header value, in order.
pub fn parse(value: &str) -> Vec<Challenge> {
    let cut = value.len().min(MAX_INPUT);
    let mut c = Cursor {
        s: &value.as_bytes()[..cut],
        i: 0,
    };
    let mut out: Vec<Challenge> = Vec::new();
    let mut kept = 0usize;
    loop {
        c.skip_ws_commas();
        if c.peek().is_none() {
            break;
        }
        let before = c.i;
        let name = c.token().to_owned();
        if name.is_empty() {
            c.skip_item();
            if c.i == before {
                c.i += 1;
            }
            continue;
        }
        c.skip_ws();
        if c.peek() == Some(b'=') && !out.is_empty() {
            // `name = value`: a parameter of the current challenge, unless it is a token68
            // (`=` padding running to the end of the item).
            let mut j = c.i;
            while c.s.get(j) == Some(&b'=') {
                j += 1;
            }
            let after = c.s[j..].iter().find(|b| !matches!(b, b' ' | b'\t'));
            if j > c.i + 1 || matches!(after, None | Some(b',')) {
                c.i = j;
                continue;
            }
            c.i += 1;
            c.skip_ws();
            let v = if c.peek() == Some(b'"') {
                c.quoted()
            } else {
                c.token().to_owned()
            };
            if kept < MAX_PARAMS {
                if let Some(ch) = out.last_mut() {
                    ch.params.push((name.to_ascii_lowercase(), v));
                    kept += 1;
                }
            }
            continue;
        }
        out.push(Challenge {
            scheme: name,
            params: Vec::new(),
        });
        // A token68 right after the scheme (`Basic abc==`) carries nothing for us.
        let save = c.i;
        let t = c.token().to_owned();
        c.skip_ws();
        if !t.is_empty() && matches!(c.peek(), Some(b'=')) {
            c.i = save;
        } else if !t.is_empty() {
            while c.peek() == Some(b'=') {
                c.i += 1;
            }
        } else {
            c.i = save;
        }
        if c.i == before {
            c.i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mcp_example() {
        let b = bearer([r#"Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource", scope="files:read""#]).unwrap();
        assert_eq!(
            b.resource_metadata.as_deref(),
            Some("https://mcp.example.com/.well-known/oauth-protected-resource")
        );
        assert_eq!(b.scope.as_deref(), Some("files:read"));
        assert_eq!(b.error, None);
    }

    #[test]
    fn a_dpop_challenge_stands_in_for_a_bearer_one() {
        let b =
            bearer([r#"DPoP error="use_dpop_nonce", resource_metadata="https://rs/prm""#]).unwrap();
        assert_eq!(b.error.as_deref(), Some("use_dpop_nonce"));
        assert_eq!(b.resource_metadata.as_deref(), Some("https://rs/prm"));
        assert!(b.dpop);
        // Both offered: the Bearer one's parameters, and the resource takes DPoP.
        let b = bearer([r#"DPoP algs="ES256", Bearer scope="x""#]).unwrap();
        assert_eq!(b.scope.as_deref(), Some("x"));
        assert!(b.dpop);
        assert!(!bearer([r#"Bearer scope="x""#]).unwrap().dpop);
        assert!(bearer([r#"Basic realm="r""#]).is_none());
    }

    #[test]
    fn escapes_tokens_and_case() {
        let c = parse(
            r#"bearer Error=invalid_token, error_description="a \"quoted\" \\ thing", scope="a b""#,
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].param("error"), Some("invalid_token"));
        assert_eq!(
            c[0].param("error_description"),
            Some(r#"a "quoted" \ thing"#)
        );
        assert_eq!(c[0].param("scope"), Some("a b"));
        assert!(bearer(["bearer"]).is_some());
    }

    #[test]
    fn several_challenges_and_token68() {
        let v = r#"Basic realm="x", Negotiate abc123==, Bearer realm="r", scope="s", DPoP algs="ES256""#;
        let c = parse(v);
        let schemes: Vec<_> = c.iter().map(|c| c.scheme.as_str()).collect();
        assert_eq!(schemes, ["Basic", "Negotiate", "Bearer", "DPoP"]);
        assert_eq!(c[0].param("realm"), Some("x"));
        assert_eq!(c[2].param("scope"), Some("s"));
        assert_eq!(c[3].param("algs"), Some("ES256"));
        let b = bearer(["Basic realm=\"x\"", "Bearer scope=\"t\""]).unwrap();
        assert_eq!(b.scope.as_deref(), Some("t"));
        assert_eq!(bearer(["Basic realm=\"x\""]), None);
    }

    #[test]
    fn garbage_never_panics() {
        for v in [
            "",
            ",,,",
            "=",
            "\"",
            "Bearer \"",
            "Bearer scope=\"unterminated",
            "Bearer scope=\"x\\",
            "Bearer ===, ,=,a=",
            "\u{e9}\u{1f600} Bearer x=y",
            "Bearer a=b=c, \t ,",
            "(){}[]<>@",
        ] {
            let _ = parse(v);
            let _ = bearer([v]);
        }
        let long = "Bearer ".to_owned() + &"a=b, ".repeat(10_000);
        let c = parse(&long);
        assert!(c[0].params.len() <= MAX_PARAMS);
        assert_eq!(
            bearer(["Bearer scope=\"unterminated"])
                .unwrap()
                .scope
                .as_deref(),
            Some("unterminated")
        );
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_parse(s in "\\PC{0,200}") {
            let _ = parse(&s);
        }
    }
}
