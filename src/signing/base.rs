//! The RFC 9421 signature base (§2.5) and the structured-field (RFC 8941) strings it and the
//! three headers are written with. Pure: strings in, strings out.

/// One covered component: its identifier as serialized (`"@authority"`,
/// `"signature-agent";key="sig1"`) and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    id: String,
    value: String,
}

impl Component {
    /// `id` is the serialized component identifier, parameters included.
    pub fn new(id: impl Into<String>, value: String) -> Component {
        Component { id: id.into(), value }
    }
}

/// The signature base over `components` with the serialized signature parameters `params`
/// (`;created=…;keyid="…"`), and the `@signature-params` value that `Signature-Input` carries
/// under the signature's label: `("@authority" …);created=…`.
pub fn signature_base(components: &[Component], params: &str) -> (String, String) {
    let ids: Vec<&str> = components.iter().map(|c| c.id.as_str()).collect();
    let signature_params = format!("({}){params}", ids.join(" "));
    let mut base = String::new();
    for component in components {
        base.push_str(&component.id);
        base.push_str(": ");
        base.push_str(&component.value);
        base.push('\n');
    }
    base.push_str("\"@signature-params\": ");
    base.push_str(&signature_params);
    (base, signature_params)
}

/// `text` as an sf-string: quoted, `\` and `"` escaped. Its characters must be visible ASCII
/// or space (the callers' are: an origin's ASCII serialization, base64, fixed names).
pub(super) fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if matches!(c, '\\' | '"') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}
