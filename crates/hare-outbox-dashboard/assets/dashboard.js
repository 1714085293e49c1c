// The dashboard's behaviour on every page: times in the viewer's time zone, the token field,
// dead-letter and key-head actions, the JSON of a row on demand, copy as JSON, and the journal's
// live tail. Served as a file so the pages' Content-Security-Policy can forbid inline scripts.
// Every value from the server goes into the page through textContent, never as HTML.
"use strict";

(function () {
  const TOKEN_KEY = "hare-outbox-dashboard-token";
  const TAIL_EVERY_MS = 2000;
  const CHARTS_KEY = "hare-outbox-dashboard-charts";
  let T = {};
  let ROOT = "";

  function fill(text, values) {
    return String(text || "").replace(/\{(\w+)\}/g, function (m, k) {
      return Object.prototype.hasOwnProperty.call(values, k) ? String(values[k]) : m;
    });
  }

  // ---- Times: the server writes UTC; the viewer reads their own zone, in the page's style.

  function pad(n) { return String(n).padStart(2, "0"); }

  function formatLocal(date, style) {
    const d = pad(date.getDate()), m = pad(date.getMonth() + 1), y = date.getFullYear();
    const clock = pad(date.getHours()) + ":" + pad(date.getMinutes());
    return style === "dotted" ? d + "." + m + "." + y + " " + clock : y + "-" + m + "-" + d + " " + clock;
  }

  function utcTitle(date) {
    return date.getUTCFullYear() + "-" + pad(date.getUTCMonth() + 1) + "-" + pad(date.getUTCDate()) + " " +
      pad(date.getUTCHours()) + ":" + pad(date.getUTCMinutes()) + ":" + pad(date.getUTCSeconds()) + " UTC";
  }

  function dateStyle() {
    return document.documentElement.getAttribute("data-dates") || "iso";
  }

  function localTimes(scope) {
    const style = dateStyle();
    scope.querySelectorAll("time[datetime]").forEach(function (el) {
      const t = new Date(el.getAttribute("datetime"));
      if (!isNaN(t.getTime())) el.textContent = formatLocal(t, style);
    });
  }

  function timeElement(iso) {
    const el = document.createElement("time");
    const t = new Date(iso);
    el.setAttribute("datetime", iso);
    el.title = utcTitle(t);
    el.textContent = formatLocal(t, dateStyle());
    return el;
  }

  // ---- Actions

  function say(text, failed) {
    const status = document.getElementById("action-status");
    if (!status) return;
    status.textContent = text;
    status.className = failed ? "failed" : "ok";
  }

  function token() {
    const field = document.getElementById("token");
    return field ? field.value.trim() : "";
  }

  async function post(path, body) {
    const t = token();
    if (!t) {
      say(T.tokenFirst, true);
      return null;
    }
    let response;
    try {
      response = await fetch(ROOT + path, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Authorization": "Bearer " + t, "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
    } catch (e) {
      say(T.failed + e, true);
      return null;
    }
    let answer = null;
    try { answer = await response.json(); } catch (e) { answer = null; }
    if (!response.ok) {
      const message = answer && answer.error ? answer.error.field + ": " + answer.error.message : response.statusText;
      say(response.status + " " + message, true);
      return null;
    }
    return answer;
  }

  function topicsOf(button) {
    const text = button.getAttribute("data-topics") || "*";
    return text.split(",").map(function (t) { return t.trim(); }).filter(function (t) { return t.length > 0; });
  }

  async function act(button) {
    const action = button.getAttribute("data-action");
    if (action === "retry") {
      const answer = await post("api/dead-letters/retry", { ids: [button.getAttribute("data-id")] });
      if (answer) { say(T.retried + answer.retried); location.reload(); }
    } else if (action === "retry-all") {
      const answer = await post("api/dead-letters/retry", { topics: topicsOf(button) });
      if (answer) { say(T.retried + answer.retried); location.reload(); }
    } else if (action === "cleanup") {
      const days = Number((document.getElementById("cleanup-days") || {}).value);
      if (!Number.isFinite(days) || days < 0) {
        say(T.daysNumber, true);
        return;
      }
      const answer = await post("api/dead-letters/cleanup", {
        older_than_seconds: Math.round(days * 86400),
        topics: topicsOf(button),
        state: "dead",
      });
      if (answer) { say(T.deleted + answer.deleted); location.reload(); }
    } else if (action === "key-retry" || action === "key-release") {
      const values = { seq: button.getAttribute("data-sequence"), key: button.getAttribute("data-key") };
      if (!token()) { say(T.tokenFirst, true); return; }
      const question = action === "key-retry" ? T.confirmRetry : T.confirmRelease;
      if (!window.confirm(fill(question, values))) return;
      const answer = await post("api/keys/head", {
        sequence: Number(values.seq),
        ordering_key: values.key,
        action: action === "key-retry" ? "retry" : "release",
      });
      if (answer) { say(T.done); location.reload(); }
    }
  }

  // ---- JSON on demand and copy as JSON

  async function loadJson(details) {
    const pre = details.querySelector("pre");
    if (!pre || details.getAttribute("data-loaded")) return;
    details.setAttribute("data-loaded", "1");
    pre.textContent = T.loading;
    try {
      const response = await fetch(details.getAttribute("data-src"), { credentials: "same-origin" });
      const event = await response.json();
      pre.textContent = response.ok ? JSON.stringify(event.payload, null, 2) : (event.error ? event.error.message : response.statusText);
    } catch (e) {
      pre.textContent = T.failed + e;
      details.removeAttribute("data-loaded");
    }
  }

  async function copyJson(button) {
    let text;
    try {
      const response = await fetch(button.getAttribute("data-src"), { credentials: "same-origin" });
      text = JSON.stringify(await response.json(), null, 2);
    } catch (e) {
      say(T.failed + e, true);
      return;
    }
    let area = document.getElementById("copy-area");
    if (!area) {
      area = document.createElement("textarea");
      area.id = "copy-area";
      area.readOnly = true;
      area.setAttribute("aria-label", button.textContent);
      button.parentNode.insertAdjacentElement("afterend", area);
    }
    area.value = text;
    area.select();
    try {
      await navigator.clipboard.writeText(text);
      say(T.copied);
    } catch (e) {
      say(T.copyFailed, true);
    }
  }

  // ---- The journal's live tail: rows built like the server's, oldest first on top.

  function labels(table) {
    return Array.prototype.map.call(table.tHead.rows[0].cells, function (th) { return th.textContent.trim(); });
  }

  function cell(row, className, label, text) {
    const td = document.createElement("td");
    td.className = className;
    td.setAttribute("data-label", label);
    if (text != null) {
      td.textContent = String(text);
      td.title = String(text);
    }
    row.appendChild(td);
    return td;
  }

  function changesOf(payload) {
    if (!payload || !Array.isArray(payload.changed)) return [];
    const before = (payload.before && typeof payload.before === "object") ? payload.before : payload.from;
    const after = (payload.after && typeof payload.after === "object") ? payload.after : null;
    return payload.changed.filter(function (c) { return typeof c === "string"; }).map(function (column) {
      return {
        column: column,
        from: before && Object.prototype.hasOwnProperty.call(before, column) ? JSON.stringify(before[column]) : "?",
        to: after && Object.prototype.hasOwnProperty.call(after, column) ? JSON.stringify(after[column]) : null,
      };
    });
  }

  function span(className, text) {
    const s = document.createElement("span");
    s.className = className;
    s.textContent = text;
    return s;
  }

  function rowOf(event, table, statusTexts) {
    const names = labels(table);
    const tr = document.createElement("tr");
    tr.className = "status-" + event.status + " fresh";
    tr.setAttribute("data-sequence", String(event.sequence));
    tr.setAttribute("data-id", event.id);
    const seq = cell(tr, "c-seq", names[0], null);
    const link = document.createElement("a");
    link.href = ROOT + "events/" + encodeURIComponent(String(event.sequence));
    link.textContent = String(event.sequence);
    seq.appendChild(link);
    cell(tr, "c-topic", names[1], event.topic);
    cell(tr, "c-object", names[2], event.object || "");
    const data = cell(tr, "c-data", names[3], null);
    const details = document.createElement("details");
    details.className = "raw";
    details.setAttribute("data-src", ROOT + "api/events/" + encodeURIComponent(event.id));
    const summary = document.createElement("summary");
    const line = document.createElement("span");
    line.className = "summary";
    const changes = changesOf(event.payload);
    if (changes.length === 0) {
      const compact = JSON.stringify(event.payload);
      const code = document.createElement("code");
      code.className = "compact";
      code.textContent = compact.length > 200 ? compact.slice(0, 200) + "…" : compact;
      line.appendChild(code);
      summary.title = compact;
    } else {
      changes.forEach(function (c) {
        const change = document.createElement("span");
        change.className = "change";
        change.appendChild(span("column", c.column));
        change.appendChild(document.createTextNode(": "));
        change.appendChild(span("from", c.from));
        if (c.to !== null) {
          change.appendChild(document.createTextNode(" → "));
          change.appendChild(span("to", c.to));
        }
        line.appendChild(change);
      });
    }
    summary.appendChild(line);
    details.appendChild(summary);
    details.appendChild(document.createElement("pre")).className = "pretty";
    data.appendChild(details);
    cell(tr, "c-created", names[4], null).appendChild(timeElement(event.created_at));
    const processed = cell(tr, "c-processed", names[5], null);
    if (event.published_at) processed.appendChild(timeElement(event.published_at));
    cell(tr, "c-who", names[6], event.author || "");
    const status = cell(tr, "c-status", names[7], null);
    status.appendChild(span("badge " + event.status, statusTexts[event.status] || event.status));
    cell(tr, "c-attempts", names[8], event.attempts);
    cell(tr, "c-error", names[9], event.last_error || "");
    cell(tr, "c-actions", names[10], null);
    return tr;
  }

  let tailTimer = null;

  async function tail(table, statusTexts) {
    const after = table.getAttribute("data-tail-after") || "0";
    const query = table.getAttribute("data-tail-query") || "";
    const url = ROOT + "api/events?" + (query ? query + "&" : "") + "after=" + encodeURIComponent(after);
    let answer;
    try {
      const response = await fetch(url, { credentials: "same-origin" });
      if (!response.ok) return;
      answer = await response.json();
    } catch (e) {
      return;
    }
    const body = table.tBodies[0];
    let newest = Number(after);
    // Oldest first: each one goes on top of the previous.
    for (const event of answer.events) {
      body.insertBefore(rowOf(event, table, statusTexts), body.firstChild);
      newest = Math.max(newest, event.sequence);
    }
    table.setAttribute("data-tail-after", String(newest));
    if (answer.events.length > 0) backlog();
    const empty = document.getElementById("empty");
    if (empty && answer.events.length > 0) empty.remove();
  }

  async function backlog() {
    const line = document.getElementById("backlog");
    if (!line) return;
    try {
      const response = await fetch(line.getAttribute("data-src"), { credentials: "same-origin" });
      const b = await response.json();
      if (!response.ok) {
        line.textContent = T.backlogOff + (b.error ? b.error.message : response.statusText);
        return;
      }
      line.textContent = fill(T.backlog, {
        pending: b.pending, age: Math.round(b.oldest_pending_age_seconds), dead: b.dead_lettered,
      });
    } catch (e) {
      line.textContent = T.backlogOff + e;
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    try { T = JSON.parse(document.body.getAttribute("data-texts") || "{}"); } catch (e) { T = {}; }
    ROOT = document.body.getAttribute("data-root") || "";
    localTimes(document);
    backlog();
    const field = document.getElementById("token");
    if (field) {
      field.value = sessionStorage.getItem(TOKEN_KEY) || "";
      field.addEventListener("input", function () {
        sessionStorage.setItem(TOKEN_KEY, field.value.trim());
      });
    }
    document.addEventListener("click", function (e) {
      const button = e.target.closest("button[data-action]");
      if (button) {
        e.preventDefault();
        act(button);
        return;
      }
      if (e.target.closest("#copy-json")) {
        e.preventDefault();
        copyJson(document.getElementById("copy-json"));
      }
    });
    // `toggle` does not bubble: listen in the capture phase.
    document.addEventListener("toggle", function (e) {
      const details = e.target;
      if (details.matches && details.matches("details.raw") && details.open) loadJson(details);
    }, true);
    // The charts stay open (or closed) as the viewer left them last; closed at first, so the
    // journal's rows come first.
    const charts = document.getElementById("charts-box");
    if (charts) {
      charts.open = localStorage.getItem(CHARTS_KEY) === "open";
      charts.addEventListener("toggle", function () {
        localStorage.setItem(CHARTS_KEY, charts.open ? "open" : "closed");
      });
    }
    const live = document.getElementById("live");
    const table = document.getElementById("journal");
    if (live && table) {
      const statusTexts = {};
      document.querySelectorAll("#filters fieldset input[name=status]").forEach(function (box) {
        statusTexts[box.value] = box.parentNode.textContent.trim();
      });
      live.addEventListener("change", function () {
        if (tailTimer) { clearInterval(tailTimer); tailTimer = null; }
        if (live.checked) {
          tail(table, statusTexts);
          tailTimer = setInterval(function () { tail(table, statusTexts); }, TAIL_EVERY_MS);
        }
      });
    }
  });
})();
