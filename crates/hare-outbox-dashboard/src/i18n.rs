//! The dashboard's languages and date formats: English and Russian texts, chosen by a `lang`
//! query parameter (which the language links set, and which is remembered in a cookie), else
//! by the cookie, else by the browser's `Accept-Language`; and the date format of the viewer's
//! language (`13.11.2026 17:20` for Russian and the other languages that write dates so,
//! `2026-11-13 17:20` otherwise). Pages carry times in UTC; the page's script shows them in the
//! viewer's time zone in that format, with UTC on hover.

use axum::http::{HeaderMap, HeaderValue, header};
use chrono::{DateTime, Utc};

/// The cookie that remembers the language chosen with the switch.
pub(crate) const LANG_COOKIE: &str = "hare_outbox_lang";

/// A language of the dashboard's texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lang {
    En,
    Ru,
}

impl Lang {
    /// The language tag: `en`, `ru`.
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Ru => "ru",
        }
    }

    fn parse(tag: &str) -> Option<Lang> {
        match primary(tag).as_str() {
            "en" => Some(Lang::En),
            "ru" => Some(Lang::Ru),
            _ => None,
        }
    }

    /// The texts of the language.
    pub(crate) fn texts(self) -> &'static Texts {
        match self {
            Lang::En => &EN,
            Lang::Ru => &RU,
        }
    }
}

/// How dates are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DateStyle {
    /// `2026-11-13 17:20`.
    Iso,
    /// `13.11.2026 17:20`.
    Dotted,
}

impl DateStyle {
    /// The name the page's script reads: `iso`, `dotted`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            DateStyle::Iso => "iso",
            DateStyle::Dotted => "dotted",
        }
    }

    /// The style of a language tag: day.month.year for languages that write dates so.
    fn of(tag: &str) -> DateStyle {
        const DOTTED: &[&str] = &[
            "ru", "uk", "be", "kk", "ky", "uz", "az", "hy", "ka", "de", "pl", "cs", "sk", "fi",
            "nb", "nn", "no", "da", "tr", "ro", "hr", "sr", "sl", "bg", "et", "lv", "is", "mk",
            "sq", "bs",
        ];
        if DOTTED.contains(&primary(tag).as_str()) {
            DateStyle::Dotted
        } else {
            DateStyle::Iso
        }
    }

    /// `time` (UTC) written in this style, to the minute.
    pub(crate) fn format(self, time: DateTime<Utc>) -> String {
        match self {
            DateStyle::Iso => time.format("%Y-%m-%d %H:%M").to_string(),
            DateStyle::Dotted => time.format("%d.%m.%Y %H:%M").to_string(),
        }
    }
}

/// The primary subtag of a language tag, lower-cased (`ru` of `ru-RU`).
fn primary(tag: &str) -> String {
    tag.trim()
        .split(['-', '_'])
        .next()
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// The language tags of an `Accept-Language` value, most preferred first (by `q`, then by
/// order); tags with `q=0` and `*` are left out, as are malformed entries.
pub(crate) fn accepted(value: &str) -> Vec<String> {
    let mut tags: Vec<(f32, usize, String)> = value
        .split(',')
        .enumerate()
        .filter_map(|(i, part)| {
            let mut pieces = part.split(';');
            let tag = pieces.next()?.trim();
            if tag.is_empty() || tag == "*" || tag.len() > 35 {
                return None;
            }
            let mut q = 1.0f32;
            for piece in pieces {
                if let Some(v) = piece.trim().strip_prefix("q=") {
                    q = v
                        .trim()
                        .parse()
                        .ok()
                        .filter(|q: &f32| (0.0..=1.0).contains(q))?;
                }
            }
            (q > 0.0).then(|| (q, i, tag.to_owned()))
        })
        .collect();
    tags.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    tags.into_iter().map(|(_, _, tag)| tag).collect()
}

/// The language and date style of one request, and whether to remember a chosen language.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Locale {
    pub(crate) lang: Lang,
    pub(crate) dates: DateStyle,
    /// Set when the request chose a language with `lang=`: the cookie to remember it.
    pub(crate) remember: bool,
}

impl Locale {
    /// The locale of a request: `lang` of the query string (`en`, `ru`), else the cookie, else
    /// the first supported language of `Accept-Language`, else English. The date style follows
    /// a chosen language, else the browser's first language.
    pub(crate) fn of(headers: &HeaderMap, query: Option<&str>) -> Locale {
        let chosen = query.and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "lang")
                .and_then(|(_, v)| Lang::parse(&v))
        });
        if let Some(lang) = chosen {
            return Locale {
                lang,
                dates: DateStyle::of(lang.tag()),
                remember: true,
            };
        }
        let cookie = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| *name == LANG_COOKIE)
            .and_then(|(_, value)| Lang::parse(value));
        if let Some(lang) = cookie {
            return Locale {
                lang,
                dates: DateStyle::of(lang.tag()),
                remember: false,
            };
        }
        let tags = headers
            .get(header::ACCEPT_LANGUAGE)
            .and_then(|v| v.to_str().ok())
            .map(accepted)
            .unwrap_or_default();
        Locale {
            lang: tags.iter().find_map(|t| Lang::parse(t)).unwrap_or(Lang::En),
            dates: tags.first().map_or(DateStyle::Iso, |t| DateStyle::of(t)),
            remember: false,
        }
    }

    /// The texts of the language.
    pub(crate) fn t(&self) -> &'static Texts {
        self.lang.texts()
    }

    /// The `Set-Cookie` header remembering a chosen language for a year, when one was chosen.
    pub(crate) fn cookie(&self) -> Option<HeaderValue> {
        self.remember.then(|| {
            HeaderValue::from_static(match self.lang {
                Lang::En => "hare_outbox_lang=en; Path=/; Max-Age=31536000; SameSite=Lax",
                Lang::Ru => "hare_outbox_lang=ru; Path=/; Max-Age=31536000; SameSite=Lax",
            })
        })
    }

    /// A time for the page: the text in this style (UTC until the script rewrites it in the
    /// viewer's zone), and the machine-readable UTC value.
    pub(crate) fn time(&self, time: DateTime<Utc>) -> TimeText {
        TimeText {
            text: self.dates.format(time),
            iso: time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            utc: format!("{} UTC", time.format("%Y-%m-%d %H:%M:%S")),
        }
    }
}

/// A time as a page shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TimeText {
    /// In the page's date style, UTC (`13.11.2026 14:20`).
    pub(crate) text: String,
    /// RFC 3339 UTC, for `<time datetime>` (`2026-11-13T14:20:00Z`).
    pub(crate) iso: String,
    /// The hover text (`2026-11-13 14:20:00 UTC`).
    pub(crate) utc: String,
}

/// Every text of the pages in one language.
#[derive(Debug)]
pub(crate) struct Texts {
    pub(crate) skip: &'static str,
    pub(crate) journal_of: &'static str,
    pub(crate) nav_label: &'static str,
    pub(crate) nav_journal: &'static str,
    pub(crate) nav_keys: &'static str,
    pub(crate) nav_topics: &'static str,
    pub(crate) nav_relays: &'static str,
    pub(crate) language: &'static str,
    pub(crate) token: &'static str,
    pub(crate) token_placeholder: &'static str,
    pub(crate) actions_off: &'static str,
    pub(crate) times_note: &'static str,
    pub(crate) backlog_loading: &'static str,
    pub(crate) charts: &'static str,
    pub(crate) charts_alt: &'static str,
    pub(crate) filters: &'static str,
    pub(crate) col_seq: &'static str,
    pub(crate) col_event: &'static str,
    pub(crate) col_object: &'static str,
    pub(crate) col_data: &'static str,
    pub(crate) col_created: &'static str,
    pub(crate) col_processed: &'static str,
    pub(crate) col_who: &'static str,
    pub(crate) col_status: &'static str,
    pub(crate) col_attempts: &'static str,
    pub(crate) col_error: &'static str,
    pub(crate) col_actions: &'static str,
    pub(crate) f_topic: &'static str,
    pub(crate) f_topic_placeholder: &'static str,
    pub(crate) f_status: &'static str,
    pub(crate) f_object_placeholder: &'static str,
    pub(crate) f_from: &'static str,
    pub(crate) f_until: &'static str,
    pub(crate) f_limit: &'static str,
    pub(crate) f_submit: &'static str,
    pub(crate) f_clear: &'static str,
    pub(crate) retry_all: &'static str,
    pub(crate) cleanup_older: &'static str,
    pub(crate) days: &'static str,
    pub(crate) cleanup: &'static str,
    pub(crate) live_tail: &'static str,
    pub(crate) retry: &'static str,
    pub(crate) json: &'static str,
    pub(crate) no_events: &'static str,
    pub(crate) newest: &'static str,
    pub(crate) older: &'static str,
    pub(crate) api: &'static str,
    pub(crate) s_pending: &'static str,
    pub(crate) s_leased: &'static str,
    pub(crate) s_retrying: &'static str,
    pub(crate) s_dead: &'static str,
    pub(crate) s_published: &'static str,
    pub(crate) event: &'static str,
    pub(crate) event_id: &'static str,
    pub(crate) ordering_key: &'static str,
    pub(crate) idempotency_key: &'static str,
    pub(crate) leased_by: &'static str,
    pub(crate) lease_until: &'static str,
    pub(crate) next_attempt: &'static str,
    pub(crate) dead_lettered: &'static str,
    pub(crate) none: &'static str,
    pub(crate) changes: &'static str,
    pub(crate) column: &'static str,
    pub(crate) before: &'static str,
    pub(crate) after: &'static str,
    pub(crate) payload: &'static str,
    pub(crate) headers: &'static str,
    pub(crate) extra: &'static str,
    pub(crate) attempts_note: &'static str,
    pub(crate) key_previous: &'static str,
    pub(crate) key_next: &'static str,
    pub(crate) key_alone: &'static str,
    pub(crate) key_none: &'static str,
    pub(crate) copy_json: &'static str,
    pub(crate) events_of_object: &'static str,
    pub(crate) not_found: &'static str,
    pub(crate) keys_title: &'static str,
    pub(crate) keys_intro: &'static str,
    pub(crate) col_key: &'static str,
    pub(crate) col_head: &'static str,
    pub(crate) col_waiting: &'static str,
    pub(crate) col_since: &'static str,
    pub(crate) release: &'static str,
    pub(crate) no_held: &'static str,
    pub(crate) more: &'static str,
    pub(crate) walked: &'static str,
    pub(crate) topics_title: &'static str,
    pub(crate) col_topic: &'static str,
    pub(crate) col_published_window: &'static str,
    pub(crate) col_oldest: &'static str,
    pub(crate) window: &'static str,
    pub(crate) show: &'static str,
    pub(crate) no_topics: &'static str,
    pub(crate) relays_title: &'static str,
    pub(crate) relays_intro: &'static str,
    pub(crate) col_relay: &'static str,
    pub(crate) col_live: &'static str,
    pub(crate) col_expired: &'static str,
    pub(crate) col_lease_ends: &'static str,
    pub(crate) no_relays: &'static str,
    /// The texts the page's script shows, as a JSON object.
    pub(crate) script: &'static str,
}

impl Texts {
    /// The text of a status name (`pending`, …).
    pub(crate) fn status(&self, name: &str) -> &'static str {
        match name {
            "pending" => self.s_pending,
            "leased" => self.s_leased,
            "retrying" => self.s_retrying,
            "dead" => self.s_dead,
            "published" => self.s_published,
            _ => "",
        }
    }
}

const EN: Texts = Texts {
    skip: "Skip to the content",
    journal_of: "journal of",
    nav_label: "Views",
    nav_journal: "Journal",
    nav_keys: "Held keys",
    nav_topics: "Topics",
    nav_relays: "Relays",
    language: "Language",
    token: "Token",
    token_placeholder: "dashboard token",
    actions_off: "Actions are off: no dashboard token is configured.",
    times_note: "Times are in your time zone; hover for UTC.",
    backlog_loading: "Backlog: …",
    charts: "Charts",
    charts_alt: "Charts: backlog, delivery rate and delivery latency over the last hour",
    filters: "Filters",
    col_seq: "№",
    col_event: "Event",
    col_object: "Object",
    col_data: "Data",
    col_created: "Created",
    col_processed: "Processed",
    col_who: "Who",
    col_status: "Status",
    col_attempts: "Attempts",
    col_error: "Last error",
    col_actions: "Actions",
    f_topic: "Topic",
    f_topic_placeholder: "doc.* or orders.created",
    f_status: "Status",
    f_object_placeholder: "plan_prod_orders #18",
    f_from: "Created from",
    f_until: "until",
    f_limit: "Per page",
    f_submit: "Filter",
    f_clear: "Clear",
    retry_all: "Retry all dead letters of these topics",
    cleanup_older: "Clean up dead letters older than",
    days: "days",
    cleanup: "Clean up",
    live_tail: "Live tail",
    retry: "Retry",
    json: "JSON",
    no_events: "No events match.",
    newest: "Newest",
    older: "Older →",
    api: "JSON API",
    s_pending: "pending",
    s_leased: "leased",
    s_retrying: "retrying",
    s_dead: "dead",
    s_published: "published",
    event: "Event",
    event_id: "Id",
    ordering_key: "Ordering key",
    idempotency_key: "Idempotency key",
    leased_by: "Leased by",
    lease_until: "Lease until",
    next_attempt: "Next attempt",
    dead_lettered: "Dead-lettered",
    none: "—",
    changes: "Changes",
    column: "Column",
    before: "Before",
    after: "After",
    payload: "Payload",
    headers: "Headers",
    extra: "Other columns",
    attempts_note: "The outbox keeps the error and the result record of the last attempt only.",
    key_previous: "← previous event of this key",
    key_next: "next event of this key →",
    key_alone: "No other event of this key nearby (undelivered ones are found however far away, delivered ones within 10,000 events).",
    key_none: "No ordering key: delivered in any order.",
    copy_json: "Copy as JSON",
    events_of_object: "Events of this object",
    not_found: "No such event",
    keys_title: "Held ordering keys",
    keys_intro: "Keys whose first undelivered event is dead or failing: their later events wait behind it.",
    col_key: "Key",
    col_head: "Blocking event",
    col_waiting: "Waiting",
    col_since: "Waiting since",
    release: "Skip and release",
    no_held: "No key is held.",
    more: "More →",
    walked: "keys with undelivered events looked at",
    topics_title: "Topics",
    col_topic: "Topic",
    col_published_window: "Published",
    col_oldest: "Oldest to deliver",
    window: "Published in the last",
    show: "Show",
    no_topics: "No topic has events to deliver, dead letters or recent deliveries.",
    relays_title: "Relays holding leases",
    relays_intro: "A relay's live leases are the batch it is delivering; expired ones that still name it point to a relay that stopped or stalls.",
    col_relay: "Relay",
    col_live: "In flight",
    col_expired: "Expired leases",
    col_lease_ends: "Leases end",
    no_relays: "No relay holds a lease.",
    script: r#"{"tokenFirst":"Type the dashboard token first.","failed":"Request failed: ","retried":"Retried: ","deleted":"Deleted: ","daysNumber":"Days must be a number ≥ 0.","backlog":"Backlog: {pending} to deliver (oldest {age} s), {dead} dead letters","backlogOff":"Backlog unavailable: ","copied":"Copied.","copyFailed":"Copying failed; the JSON is selected: press Ctrl+C.","confirmRetry":"Retry event №{seq}, the head of key {key}?","confirmRelease":"Take event №{seq} out of key {key}? It keeps its state; the key's later events are delivered without waiting for it.","done":"Done.","stale":"Nothing changed: the key's head moved on. Reload the page.","loading":"Loading…"}"#,
};

const RU: Texts = Texts {
    skip: "Перейти к содержимому",
    journal_of: "журнал таблицы",
    nav_label: "Разделы",
    nav_journal: "Журнал",
    nav_keys: "Задержанные ключи",
    nav_topics: "Топики",
    nav_relays: "Релеи",
    language: "Язык",
    token: "Токен",
    token_placeholder: "токен панели",
    actions_off: "Действия выключены: токен панели не задан.",
    times_note: "Время — в вашем часовом поясе; UTC — при наведении.",
    backlog_loading: "Очередь: …",
    charts: "Графики",
    charts_alt: "Графики: очередь, скорость доставки и задержка доставки за последний час",
    filters: "Фильтры",
    col_seq: "№",
    col_event: "Событие",
    col_object: "Объект",
    col_data: "Данные",
    col_created: "Создано",
    col_processed: "Обработано",
    col_who: "Кто",
    col_status: "Статус",
    col_attempts: "Попытки",
    col_error: "Последняя ошибка",
    col_actions: "Действия",
    f_topic: "Топик",
    f_topic_placeholder: "doc.* или orders.created",
    f_status: "Статус",
    f_object_placeholder: "plan_prod_orders #18",
    f_from: "Создано с",
    f_until: "по",
    f_limit: "На странице",
    f_submit: "Показать",
    f_clear: "Сбросить",
    retry_all: "Повторить все недоставленные этих топиков",
    cleanup_older: "Удалить недоставленные старше",
    days: "дн.",
    cleanup: "Удалить",
    live_tail: "Следить за новыми",
    retry: "Повторить",
    json: "JSON",
    no_events: "Подходящих событий нет.",
    newest: "Новые",
    older: "Старше →",
    api: "JSON API",
    s_pending: "ожидает",
    s_leased: "доставляется",
    s_retrying: "повтор",
    s_dead: "не доставлено",
    s_published: "доставлено",
    event: "Событие",
    event_id: "Id",
    ordering_key: "Ключ порядка",
    idempotency_key: "Ключ идемпотентности",
    leased_by: "Взял релей",
    lease_until: "Аренда до",
    next_attempt: "Следующая попытка",
    dead_lettered: "Признано недоставленным",
    none: "—",
    changes: "Изменения",
    column: "Поле",
    before: "Было",
    after: "Стало",
    payload: "Данные",
    headers: "Заголовки",
    extra: "Другие столбцы",
    attempts_note: "Outbox хранит ошибку и запись о результате только последней попытки.",
    key_previous: "← предыдущее событие этого ключа",
    key_next: "следующее событие этого ключа →",
    key_alone: "Других событий этого ключа рядом нет (недоставленные ищутся на любом расстоянии, доставленные — в пределах 10 000 событий).",
    key_none: "Ключа порядка нет: доставляется в любом порядке.",
    copy_json: "Копировать JSON",
    events_of_object: "События этого объекта",
    not_found: "Такого события нет",
    keys_title: "Задержанные ключи порядка",
    keys_intro: "Ключи, первое недоставленное событие которых не доставлено окончательно или повторяется: следующие события ключа ждут его.",
    col_key: "Ключ",
    col_head: "Блокирующее событие",
    col_waiting: "Ждут",
    col_since: "Ждёт с",
    release: "Пропустить и освободить",
    no_held: "Задержанных ключей нет.",
    more: "Дальше →",
    walked: "ключей с недоставленными событиями просмотрено",
    topics_title: "Топики",
    col_topic: "Топик",
    col_published_window: "Доставлено",
    col_oldest: "Самое старое в очереди",
    window: "Доставлено за последние",
    show: "Показать",
    no_topics: "Ни в одном топике нет событий к доставке, недоставленных или недавно доставленных.",
    relays_title: "Релеи, держащие аренды",
    relays_intro: "Живые аренды релея — пачка, которую он доставляет; просроченные аренды с его именем говорят о релее, который остановился или завис.",
    col_relay: "Релей",
    col_live: "Доставляется",
    col_expired: "Просроченные аренды",
    col_lease_ends: "Аренды кончаются",
    no_relays: "Ни один релей не держит аренду.",
    script: r#"{"tokenFirst":"Сначала введите токен панели.","failed":"Запрос не удался: ","retried":"Повторено: ","deleted":"Удалено: ","daysNumber":"Число дней должно быть ≥ 0.","backlog":"Очередь: {pending} к доставке (самое старое — {age} с), недоставленных: {dead}","backlogOff":"Очередь недоступна: ","copied":"Скопировано.","copyFailed":"Скопировать не удалось; JSON выделен: нажмите Ctrl+C.","confirmRetry":"Повторить событие №{seq}, голову ключа {key}?","confirmRelease":"Вывести событие №{seq} из ключа {key}? Оно сохранит своё состояние; следующие события ключа будут доставлены, не дожидаясь его.","done":"Готово.","stale":"Ничего не изменилось: голова ключа уже другая. Обновите страницу.","loading":"Загрузка…"}"#,
};

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(name.clone(), HeaderValue::from_static(value));
        }
        h
    }

    #[test]
    fn accept_language_orders_by_q_then_position() {
        assert_eq!(accepted("en-US,ru;q=0.9,de;q=0.95"), ["en-US", "de", "ru"]);
        assert_eq!(accepted("ru-RU, *;q=0.1, fr;q=0"), ["ru-RU"]);
        assert_eq!(accepted("ru;q=2,en"), ["en"], "a malformed q drops its tag");
        assert!(accepted("").is_empty());
    }

    #[test]
    fn query_then_cookie_then_accept_language() {
        let ru = headers(&[(header::ACCEPT_LANGUAGE, "ru-RU,ru;q=0.9,en;q=0.8")]);
        let l = Locale::of(&ru, None);
        assert_eq!(
            (l.lang, l.dates, l.remember),
            (Lang::Ru, DateStyle::Dotted, false)
        );
        let l = Locale::of(&ru, Some("topic=x&lang=en"));
        assert_eq!(
            (l.lang, l.dates, l.remember),
            (Lang::En, DateStyle::Iso, true)
        );
        assert!(l.cookie().is_some());
        let cookie = headers(&[
            (header::ACCEPT_LANGUAGE, "ru"),
            (header::COOKIE, "a=b; hare_outbox_lang=en"),
        ]);
        assert_eq!(Locale::of(&cookie, None).lang, Lang::En);
        // German dates, English texts.
        let de = headers(&[(header::ACCEPT_LANGUAGE, "de-DE,en;q=0.5")]);
        let l = Locale::of(&de, None);
        assert_eq!((l.lang, l.dates), (Lang::En, DateStyle::Dotted));
        let none = Locale::of(&HeaderMap::new(), Some("lang=fr"));
        assert_eq!(
            (none.lang, none.dates, none.remember),
            (Lang::En, DateStyle::Iso, false)
        );
    }

    #[test]
    fn dates_in_both_styles() {
        let t = DateTime::parse_from_rfc3339("2026-11-13T17:20:59Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(DateStyle::Dotted.format(t), "13.11.2026 17:20");
        assert_eq!(DateStyle::Iso.format(t), "2026-11-13 17:20");
        let l = Locale::of(&HeaderMap::new(), None);
        assert_eq!(l.time(t).iso, "2026-11-13T17:20:59Z");
        assert_eq!(l.time(t).utc, "2026-11-13 17:20:59 UTC");
    }

    #[test]
    fn script_texts_are_json_objects() {
        for texts in [&EN, &RU] {
            let v: serde_json::Value = serde_json::from_str(texts.script).unwrap();
            assert!(v.get("confirmRelease").is_some());
        }
    }
}
