//! The one template renderer of the backends' SQL files: text substitution only, no SQL here.
//!
//! A backend keeps its statements as `.sql` files with `{name}` placeholders (quoted table
//! names, column lists, literals of a validated configuration) and renders each once per table
//! into its statement cache; values bound at run time are always parameters, never rendered.

/// Fills the `{name}` placeholders of `template` with `values` (name without braces, text) in
/// one pass, so a value can never feed another placeholder; an unknown `{…}` (such as a `'{}'`
/// literal) is kept as it is. Lines whose first non-blank characters are `--` (SQL comments) are
/// dropped first, so no value lands inside a comment.
///
/// ```
/// use hare_outbox_core::backend::template::render;
///
/// let sql = render(
///     "-- the next event\nSELECT '{}' FROM {table} LIMIT {limit}",
///     &[("table", "\"hare_outbox\"".to_owned()), ("limit", "1".to_owned())],
/// );
/// assert_eq!(sql, "SELECT '{}' FROM \"hare_outbox\" LIMIT 1\n");
/// ```
pub fn render<N: AsRef<str>, V: AsRef<str>>(template: &str, values: &[(N, V)]) -> String {
    let template: String = template
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .map(|line| format!("{line}\n"))
        .collect();
    let mut out = String::with_capacity(template.len() * 2);
    let mut rest = template.as_str();
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let value = after.find('}').and_then(|end| {
            let name = &after[..end];
            values
                .iter()
                .find(|(n, _)| n.as_ref() == name)
                .map(|(_, v)| (v.as_ref(), end))
        });
        match value {
            Some((value, end)) => {
                out.push_str(value);
                rest = &after[end + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn one_pass_keeps_unknown_placeholders_and_drops_comments() {
        let out = render(
            "  -- {a} in a comment\nSELECT {a}, {b}, '{}', {c}",
            &[("a", "{b}".to_owned()), ("b", "2".to_owned())],
        );
        assert_eq!(out, "SELECT {b}, 2, '{}', {c}\n");
    }
}
