//! Topic filters of a relay: exact names and `prefix*` patterns.

use crate::error::{Error, Result};

/// One topic pattern: an exact topic name, or a prefix pattern ending in `*`.
///
/// `_` and `%` are ordinary characters (no SQL `LIKE` meaning). A `*` anywhere but at the end, or
/// any `?`, is refused: only prefix patterns are supported.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TopicPattern {
    /// The topic equals this name.
    Exact(String),
    /// The topic starts with this prefix (written `prefix*`; `*` alone matches every topic).
    Prefix(String),
}

impl TopicPattern {
    /// Parses `name` or `prefix*`.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the pattern when it is empty, has `?`, or has `*` anywhere
    /// but at the end.
    pub fn parse(pattern: &str) -> Result<Self> {
        if pattern.is_empty() {
            return Err(Error::configuration(
                "topic pattern \"\" is empty; write a topic name or a prefix ending in `*`",
            ));
        }
        let (body, prefix) = match pattern.strip_suffix('*') {
            Some(body) => (body, true),
            None => (pattern, false),
        };
        if body.contains('*') || body.contains('?') {
            return Err(Error::configuration(format!(
                "topic pattern {pattern:?} is not allowed: only exact names and prefixes ending in `*` are supported (`*` elsewhere and `?` are refused)"
            )));
        }
        Ok(if prefix {
            TopicPattern::Prefix(body.to_owned())
        } else {
            TopicPattern::Exact(body.to_owned())
        })
    }

    /// Whether `topic` matches.
    pub fn matches(&self, topic: &str) -> bool {
        match self {
            TopicPattern::Exact(name) => topic == name,
            TopicPattern::Prefix(prefix) => topic.starts_with(prefix.as_str()),
        }
    }
}

impl std::fmt::Display for TopicPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TopicPattern::Exact(name) => f.write_str(name),
            TopicPattern::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

/// Which topics a relay (or an operation of it) handles: `include` (`None` = every topic) minus
/// `exclude`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicFilter {
    include: Option<Vec<TopicPattern>>,
    exclude: Vec<TopicPattern>,
}

impl TopicFilter {
    /// Every topic.
    pub fn all() -> Self {
        TopicFilter::default()
    }

    /// Builds a filter from pattern strings; `include = None` means every topic.
    ///
    /// # Errors
    /// [`Error::Configuration`] for the first pattern [`TopicPattern::parse`] refuses.
    pub fn new<I, E, S, T>(include: Option<I>, exclude: E) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
        E: IntoIterator<Item = T>,
        T: AsRef<str>,
    {
        let include = include
            .map(|patterns| {
                patterns
                    .into_iter()
                    .map(|p| TopicPattern::parse(p.as_ref()))
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?;
        let exclude = exclude
            .into_iter()
            .map(|p| TopicPattern::parse(p.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        Ok(TopicFilter { include, exclude })
    }

    /// A filter of parsed patterns: `include` (`None` = every topic) minus `exclude`.
    pub fn from_patterns(include: Option<Vec<TopicPattern>>, exclude: Vec<TopicPattern>) -> Self {
        TopicFilter { include, exclude }
    }

    /// The included patterns; `None` = every topic.
    pub fn include(&self) -> Option<&[TopicPattern]> {
        self.include.as_deref()
    }

    /// The excluded patterns.
    pub fn exclude(&self) -> &[TopicPattern] {
        &self.exclude
    }

    /// Whether every topic passes.
    pub fn is_all(&self) -> bool {
        self.include.is_none() && self.exclude.is_empty()
    }

    /// Whether `topic` passes.
    pub fn matches(&self, topic: &str) -> bool {
        let included = self
            .include
            .as_ref()
            .is_none_or(|patterns| patterns.iter().any(|p| p.matches(topic)));
        included && !self.exclude.iter().any(|p| p.matches(topic))
    }

    /// This filter narrowed by `other`: a topic must pass both.
    pub fn and(&self, other: &TopicFilter) -> TopicFilter {
        let include = match (&self.include, &other.include) {
            (None, None) => None,
            (Some(a), None) => Some(a.clone()),
            (None, Some(b)) => Some(b.clone()),
            (Some(a), Some(b)) => Some(intersect(a, b)),
        };
        let mut exclude = self.exclude.clone();
        exclude.extend(other.exclude.iter().cloned());
        TopicFilter { include, exclude }
    }

    /// The four lists a SQL statement binds: (include every topic?, included exact names,
    /// included prefixes, excluded exact names, excluded prefixes).
    pub fn sql_parts(&self) -> (bool, Vec<String>, Vec<String>, Vec<String>, Vec<String>) {
        let split = |patterns: &[TopicPattern]| {
            let mut exact = Vec::new();
            let mut prefixes = Vec::new();
            for p in patterns {
                match p {
                    TopicPattern::Exact(name) => exact.push(name.clone()),
                    TopicPattern::Prefix(prefix) => prefixes.push(prefix.clone()),
                }
            }
            (exact, prefixes)
        };
        let (include_exact, include_prefixes) = split(self.include.as_deref().unwrap_or(&[]));
        let (exclude_exact, exclude_prefixes) = split(&self.exclude);
        (
            self.include.is_none(),
            include_exact,
            include_prefixes,
            exclude_exact,
            exclude_prefixes,
        )
    }
}

/// Patterns matching a topic that both lists match.
fn intersect(a: &[TopicPattern], b: &[TopicPattern]) -> Vec<TopicPattern> {
    let mut out = Vec::new();
    for x in a {
        for y in b {
            let both = match (x, y) {
                (TopicPattern::Exact(n), other) | (other, TopicPattern::Exact(n)) => {
                    other.matches(n).then(|| TopicPattern::Exact(n.clone()))
                }
                (TopicPattern::Prefix(p), TopicPattern::Prefix(q)) => {
                    if p.starts_with(q.as_str()) {
                        Some(x.clone())
                    } else if q.starts_with(p.as_str()) {
                        Some(y.clone())
                    } else {
                        None
                    }
                }
            };
            if let Some(pattern) = both
                && !out.contains(&pattern)
            {
                out.push(pattern);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_prefixes() {
        assert_eq!(
            TopicPattern::parse("library.loan").unwrap(),
            TopicPattern::Exact("library.loan".into())
        );
        assert_eq!(
            TopicPattern::parse("library.*").unwrap(),
            TopicPattern::Prefix("library.".into())
        );
        assert_eq!(
            TopicPattern::parse("*").unwrap(),
            TopicPattern::Prefix(String::new())
        );
        for bad in ["", "a*b", "*.x", "a?", "**"] {
            assert!(
                matches!(TopicPattern::parse(bad), Err(Error::Configuration(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn underscore_and_percent_are_literal() {
        let p = TopicPattern::parse("a_b%*").unwrap();
        assert!(p.matches("a_b%c"));
        assert!(!p.matches("axbyc"));
    }

    #[test]
    fn filter_includes_then_excludes() {
        let f = TopicFilter::new(Some(["library.*", "taskiq"]), ["library.secret*"]).unwrap();
        assert!(f.matches("library.loan.created"));
        assert!(f.matches("taskiq"));
        assert!(!f.matches("library.secret.x"));
        assert!(!f.matches("billing.x"));
        let all = TopicFilter::new(None::<Vec<&str>>, ["taskiq"]).unwrap();
        assert!(all.matches("anything") && !all.matches("taskiq"));
    }

    #[test]
    fn and_narrows() {
        let relay = TopicFilter::new(Some(["library.*"]), Vec::<&str>::new()).unwrap();
        let op = TopicFilter::new(
            Some(["library.loan.*", "billing.*", "library.x"]),
            Vec::<&str>::new(),
        )
        .unwrap();
        let both = relay.and(&op);
        assert!(both.matches("library.loan.updated"));
        assert!(both.matches("library.x"));
        assert!(!both.matches("billing.paid"));
        assert!(!both.matches("library.book.updated"));
    }
}
