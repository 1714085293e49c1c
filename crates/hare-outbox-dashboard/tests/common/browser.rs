//! A real headless Chromium driven through chromedriver (WebDriver) on loopback, for the browser
//! tests: a chromedriver of the test's own on a free port, one session, screenshots kept in
//! `$CARGO_TARGET_DIR/test-artifacts/dashboard/`, and the page checks the tests share (texts,
//! accessibility basics, overflow at a phone's width).
//!
//! Needs Debian's `chromium` and `chromium-driver` (`apt-get install -y chromium
//! chromium-driver`); `HARE_OUTBOX_CHROMEDRIVER` and `HARE_OUTBOX_CHROMIUM` override their paths.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use futures::FutureExt as _;
use hare_outbox_testkit::wait_for;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

/// The longest a browser test waits for one condition.
pub const WAIT: Duration = Duration::from_secs(20);

/// How a browser is started.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The window size in CSS pixels (desktop) or the emulated screen (phone).
    pub size: (u32, u32),
    /// Emulate a phone of `size` (touch, device metrics) instead of a desktop window.
    pub phone: bool,
    /// The browser's `Accept-Language`; Chromium's default (`en-US`) when `None`.
    pub accept_language: Option<&'static str>,
    /// The browser's time zone (`TZ` of the driver and so of the browser); the machine's when
    /// `None`.
    pub time_zone: Option<&'static str>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            size: (1400, 1000),
            phone: false,
            accept_language: None,
            time_zone: None,
        }
    }
}

/// A chromedriver of the test's own on a free port, and one browser session on it.
pub struct Browser {
    driver: tokio::process::Child,
    client: Client,
}

impl Browser {
    async fn start(setup: &Setup) -> Browser {
        let driver_path = std::env::var("HARE_OUTBOX_CHROMEDRIVER")
            .unwrap_or_else(|_| "/usr/bin/chromedriver".to_owned());
        let chromium_path = std::env::var("HARE_OUTBOX_CHROMIUM")
            .unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
        for (what, path) in [("chromedriver", &driver_path), ("chromium", &chromium_path)] {
            assert!(
                std::path::Path::new(path).exists(),
                "{what} is not installed at {path}: the browser tests need it; install both with \
                 `apt-get install -y chromium chromium-driver` (or point HARE_OUTBOX_CHROMEDRIVER \
                 and HARE_OUTBOX_CHROMIUM at them)"
            );
        }
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let mut command = tokio::process::Command::new(&driver_path);
        command
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        if let Some(zone) = setup.time_zone {
            command.env("TZ", zone);
        }
        let driver = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {driver_path} failed: {e}"));
        wait_for("chromedriver to listen", WAIT, || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ())
        })
        .await;
        let (width, height) = setup.size;
        let mut args = vec![
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--hide-scrollbars".to_owned(),
        ];
        let mut options = serde_json::Map::new();
        options.insert("binary".to_owned(), json!(chromium_path));
        if setup.phone {
            options.insert(
                "mobileEmulation".to_owned(),
                json!({"deviceMetrics": {"width": width, "height": height, "pixelRatio": 2.0, "touch": true},
                       "userAgent": "Mozilla/5.0 (Linux; Android 14) Mobile"}),
            );
        } else {
            args.push(format!("--window-size={width},{height}"));
        }
        if let Some(languages) = setup.accept_language {
            args.push(format!("--accept-lang={languages}"));
            args.push(format!(
                "--lang={}",
                languages.split(',').next().unwrap_or("en")
            ));
            options.insert(
                "prefs".to_owned(),
                json!({"intl.accept_languages": languages}),
            );
        }
        options.insert("args".to_owned(), json!(args));
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("goog:chromeOptions".to_owned(), Value::Object(options));
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| {
                panic!("opening a Chromium session through chromedriver failed: {e}")
            });
        Browser { driver, client }
    }

    /// Runs `body` in a desktop browser of 1400 × 1000, then closes the session and the driver
    /// whether it passed or not.
    pub async fn run<F, Fut>(body: F)
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = ()>,
    {
        Self::run_with(Setup::default(), body).await;
    }

    /// Runs `body` in a browser started as `setup` says, then closes it whether it passed or not.
    pub async fn run_with<F, Fut>(setup: Setup, body: F)
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = ()>,
    {
        let mut browser = Browser::start(&setup).await;
        let outcome = AssertUnwindSafe(body(browser.client.clone()))
            .catch_unwind()
            .await;
        let _ = browser.client.clone().close().await;
        let _ = browser.driver.kill().await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }
}

/// Saves a screenshot as `$CARGO_TARGET_DIR/test-artifacts/dashboard/<name>.png` and prints
/// the path.
pub async fn screenshot(client: &Client, name: &str) {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(".."));
    let dir = target.join("test-artifacts").join("dashboard");
    std::fs::create_dir_all(&dir).unwrap();
    let png = client.screenshot().await.unwrap();
    let path = dir.join(format!("{name}.png"));
    std::fs::write(&path, png).unwrap();
    println!("screenshot: {}", path.display());
}

/// The texts of the elements `css` finds (as rendered: clipped text is left out); empty while
/// the page is loading.
pub async fn texts(client: &Client, css: &str) -> Vec<String> {
    let Ok(elements) = client.find_all(Locator::Css(css)).await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in elements {
        match e.text().await {
            Ok(t) => out.push(t),
            Err(_) => return Vec::new(),
        }
    }
    out
}

/// The `textContent` of the elements `css` finds, whether shown or clipped.
pub async fn contents(client: &Client, css: &str) -> Vec<String> {
    let value = client
        .execute(
            "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.textContent.trim());",
            vec![json!(css)],
        )
        .await
        .unwrap();
    serde_json::from_value(value).unwrap()
}

/// Loads `url` and waits until `css` is on the page.
pub async fn open(client: &Client, url: &str, css: &str) {
    client.goto(url).await.unwrap();
    client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css} did not appear on {url}: {e}"));
}

/// The accessibility basics of the page in the browser, as a list of problems (empty = none):
/// the document has a language; every form control and button has an accessible name (a label,
/// `aria-label`, `aria-labelledby`, a title or its text); every image has an `alt`; every
/// table header cell has a scope; and every visible text has a contrast of at least 4.5:1 with
/// the background behind it (3:1 for large text), computed with the WCAG 2 formula from the
/// colours the browser applied.
pub async fn accessibility_problems(client: &Client) -> Vec<String> {
    let value = client.execute(ACCESSIBILITY_CHECK, vec![]).await.unwrap();
    serde_json::from_value(value).unwrap()
}

const ACCESSIBILITY_CHECK: &str = r##"
const problems = [];
if (!document.documentElement.lang) problems.push("html has no lang");
const describe = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
  (el.getAttribute("name") ? "[name=" + el.getAttribute("name") + "]" : "");
const named = (el) => {
  if ((el.getAttribute("aria-label") || "").trim()) return true;
  const by = el.getAttribute("aria-labelledby");
  if (by && by.split(/\s+/).some(id => (document.getElementById(id) || {}).textContent)) return true;
  if (el.labels && Array.from(el.labels).some(l => l.textContent.trim())) return true;
  if ((el.getAttribute("title") || "").trim()) return true;
  if (el.tagName === "BUTTON" && el.textContent.trim()) return true;
  return false;
};
document.querySelectorAll("input:not([type=hidden]), select, textarea, button").forEach(el => {
  if (!named(el)) problems.push("no accessible name: " + describe(el));
});
document.querySelectorAll("img").forEach(el => {
  if (!el.hasAttribute("alt")) problems.push("image without alt: " + describe(el));
});
document.querySelectorAll("thead th").forEach(el => {
  if (!el.getAttribute("scope")) problems.push("header cell without scope: " + el.textContent.trim());
});
const rgba = (text) => {
  const m = text.match(/rgba?\(([^)]+)\)/);
  if (!m) return [0, 0, 0, 0];
  const p = m[1].split(/[ ,\/]+/).filter(Boolean).map(Number);
  return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
};
const blend = (top, bottom) => {
  const a = top[3];
  return [0, 1, 2].map(i => top[i] * a + bottom[i] * (1 - a)).concat([1]);
};
const background = (el) => {
  const layers = [];
  for (let e = el; e; e = e.parentElement) {
    const c = rgba(getComputedStyle(e).backgroundColor);
    if (c[3] > 0) layers.push(c);
    if (c[3] >= 1) break;
  }
  let colour = [255, 255, 255, 1];
  for (let i = layers.length - 1; i >= 0; i--) colour = blend(layers[i], colour);
  return colour;
};
const luminance = (c) => {
  const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
};
const seen = new Set();
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  if (!node.textContent.trim()) continue;
  const el = node.parentElement;
  if (!el || seen.has(el)) continue;
  seen.add(el);
  const style = getComputedStyle(el);
  const rect = el.getBoundingClientRect();
  if (style.visibility === "hidden" || style.display === "none" || rect.width === 0 || rect.height === 0) continue;
  if (el.closest(".visually-hidden, .skip, [disabled], svg")) continue;
  const bg = background(el);
  const fg = blend(rgba(style.color), bg);
  const l1 = luminance(fg), l2 = luminance(bg);
  const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
  const size = parseFloat(style.fontSize);
  const large = size >= 24 || (size >= 18.66 && Number(style.fontWeight) >= 700);
  if (ratio < (large ? 3 : 4.5)) {
    problems.push("contrast " + ratio.toFixed(2) + ":1 of " + describe(el) + " \"" +
      node.textContent.trim().slice(0, 30) + "\" (" + style.color + " on rgb(" + bg.slice(0, 3).join(",") + "))");
  }
}
return problems;
"##;

/// Whether the page is wider than the window (a horizontal scroll bar at a phone's width):
/// `(document width, window width)`.
pub async fn widths(client: &Client) -> (u64, u64) {
    let value = client
        .execute(
            "return [document.documentElement.scrollWidth, window.innerWidth];",
            vec![],
        )
        .await
        .unwrap();
    let pair: (u64, u64) = serde_json::from_value(value).unwrap();
    pair
}
