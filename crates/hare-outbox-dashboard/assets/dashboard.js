// The journal page's behaviour: the token field, the dead-letter buttons and the live tail.
// Served as a file so the page's Content-Security-Policy can forbid inline scripts. Every value
// from the server goes into the page through textContent, never as HTML.
"use strict";

(function () {
  const TOKEN_KEY = "hare-outbox-dashboard-token";
  const TAIL_EVERY_MS = 2000;

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
      say("Type the dashboard token first.", true);
      return null;
    }
    let response;
    try {
      response = await fetch(path, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Authorization": "Bearer " + t, "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
    } catch (e) {
      say("Request failed: " + e, true);
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
    return text.split(",").map((t) => t.trim()).filter((t) => t.length > 0);
  }

  async function act(button) {
    const action = button.getAttribute("data-action");
    if (action === "retry") {
      const answer = await post("api/dead-letters/retry", { ids: [button.getAttribute("data-id")] });
      if (answer) { say("Retried " + answer.retried + "."); location.reload(); }
    } else if (action === "retry-all") {
      const answer = await post("api/dead-letters/retry", { topics: topicsOf(button) });
      if (answer) { say("Retried " + answer.retried + "."); location.reload(); }
    } else if (action === "cleanup") {
      const days = Number((document.getElementById("cleanup-days") || {}).value);
      if (!Number.isFinite(days) || days < 0) {
        say("Days must be a number ≥ 0.", true);
        return;
      }
      const answer = await post("api/dead-letters/cleanup", {
        older_than_seconds: Math.round(days * 86400),
        topics: topicsOf(button),
        state: "dead",
      });
      if (answer) { say("Deleted " + answer.deleted + "."); location.reload(); }
    }
  }

  function cell(row, className, text) {
    const td = document.createElement("td");
    td.className = className;
    td.textContent = text == null ? "" : String(text);
    row.appendChild(td);
    return td;
  }

  function shortTime(iso) {
    return iso ? iso.replace("T", " ").replace(/\.\d+/, "").replace(/(Z|[+-]00:00)$/, "") : "";
  }

  function rowOf(event) {
    const tr = document.createElement("tr");
    tr.className = "status-" + event.status + " fresh";
    tr.setAttribute("data-sequence", String(event.sequence));
    tr.setAttribute("data-id", event.id);
    const seq = cell(tr, "c-seq", "");
    const link = document.createElement("a");
    link.href = "api/events/" + encodeURIComponent(event.id);
    link.textContent = String(event.sequence);
    seq.appendChild(link);
    cell(tr, "c-topic", event.topic);
    cell(tr, "c-object", event.object);
    const data = cell(tr, "c-data", "");
    const details = document.createElement("details");
    const summary = document.createElement("summary");
    const code = document.createElement("code");
    code.className = "compact";
    const compact = JSON.stringify(event.payload);
    code.textContent = compact.length > 160 ? compact.slice(0, 160) + "…" : compact;
    summary.appendChild(code);
    const pre = document.createElement("pre");
    pre.className = "pretty";
    pre.textContent = JSON.stringify(event.payload, null, 2);
    details.appendChild(summary);
    details.appendChild(pre);
    data.appendChild(details);
    cell(tr, "c-created", shortTime(event.created_at)).title = event.created_at || "";
    cell(tr, "c-processed", shortTime(event.published_at)).title = event.published_at || "";
    cell(tr, "c-who", event.author);
    const status = cell(tr, "c-status", "");
    const badge = document.createElement("span");
    badge.className = "badge " + event.status;
    badge.textContent = event.status;
    status.appendChild(badge);
    cell(tr, "c-attempts", event.attempts);
    cell(tr, "c-error", event.last_error);
    cell(tr, "c-actions", "");
    return tr;
  }

  let tailTimer = null;

  async function tail(table) {
    const after = table.getAttribute("data-tail-after") || "0";
    const query = table.getAttribute("data-tail-query") || "";
    const url = "api/events?" + (query ? query + "&" : "") + "after=" + encodeURIComponent(after);
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
      body.insertBefore(rowOf(event), body.firstChild);
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
        line.textContent = "Backlog unavailable: " + (b.error ? b.error.message : response.statusText);
        return;
      }
      line.textContent = "Backlog: " + b.pending + " to deliver (oldest " +
        Math.round(b.oldest_pending_age_seconds) + " s), " + b.dead_lettered + " dead letters";
    } catch (e) {
      line.textContent = "Backlog unavailable: " + e;
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
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
      }
    });
    const live = document.getElementById("live");
    const table = document.getElementById("journal");
    if (live && table) {
      live.addEventListener("change", function () {
        if (tailTimer) { clearInterval(tailTimer); tailTimer = null; }
        if (live.checked) {
          tail(table);
          tailTimer = setInterval(function () { tail(table); }, TAIL_EVERY_MS);
        }
      });
    }
  });
})();
