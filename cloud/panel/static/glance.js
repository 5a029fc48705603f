// The fleet page at a glance (issue 29), owned by the glance lane: it
// applies "live:fleet" events (see live.js) to the table and the overview
// strip, and ticks every <time data-tick> ("last seen 12 s ago").
//
// Rows are <tr data-device-id="ID"> with cells <td data-field="status |
// alerts | cpu | mem | disk | seen">; the strip's numbers are the <strong>
// of [data-summary-alerts="SEVERITY"] and [data-summary-devices="STATUS |
// all"]. Only rows on the page change: a device the event names that the
// page does not show is left out. Text goes in with textContent only.
"use strict";
(function () {
  // ago says how long before now (ms) the time t (ms) was, as the server
  // renders it (tickAgo in fleet.go).
  function ago(now, t) {
    const s = Math.max(0, Math.floor((now - t) / 1000));
    if (s < 60) return s + " s ago";
    if (s < 3600) return Math.floor(s / 60) + " min ago";
    if (s < 48 * 3600) return Math.floor(s / 3600) + " h ago";
    return Math.floor(s / 86400) + " days ago";
  }

  function tick() {
    const now = Date.now();
    for (const el of document.querySelectorAll("time[data-tick]")) {
      const t = Date.parse(el.getAttribute("datetime"));
      if (!isNaN(t)) {
        const text = ago(now, t);
        if (el.textContent !== text) el.textContent = text;
      }
    }
  }

  // pct is a percentage as the table shows it ("43%", "—" for none).
  function pct(v) {
    return typeof v === "number" && isFinite(v) ? Math.round(v) + "%" : "—";
  }

  // badge is a <span class="CLASS CLASS-word">WORD</span>.
  function badge(cls, word) {
    const span = document.createElement("span");
    span.className = cls + " " + cls + "-" + String(word).toLowerCase().replace(/[^a-z]/g, "");
    span.textContent = word;
    return span;
  }

  function setText(cell, text) {
    if (cell && cell.textContent !== text) cell.textContent = text;
  }

  function applyDevice(row, g) {
    const cell = (f) => row.querySelector('[data-field="' + f + '"]');
    const status = cell("status");
    if (status && g.status && status.textContent !== g.status) {
      status.replaceChildren(badge("status", g.status));
    }
    const alerts = cell("alerts");
    if (alerts) {
      const n = g.openAlerts || 0;
      if (n > 0 && g.worst) {
        const count = document.createElement("span");
        count.className = "alert-n";
        count.textContent = n + " open";
        alerts.replaceChildren(badge("sev", g.worst), " ", count);
      } else {
        const none = document.createElement("span");
        none.className = "sub";
        none.textContent = "none";
        alerts.replaceChildren(none);
      }
    }
    setText(cell("cpu"), pct(g.cpuPct));
    setText(cell("mem"), pct(g.memPct));
    setText(cell("disk"), pct(g.diskUsedPct));
    const seen = cell("seen");
    const t = g.lastSeen ? Date.parse(g.lastSeen) : NaN;
    if (seen && !isNaN(t)) {
      let el = seen.querySelector("time[data-tick]");
      if (!el) {
        el = document.createElement("time");
        el.setAttribute("data-tick", "");
        seen.replaceChildren(el);
      }
      const iso = new Date(t).toISOString().replace(/\.\d{3}Z$/, "Z");
      el.setAttribute("datetime", iso);
      el.title = iso.replace("T", " ").replace(/:\d\dZ$/, " UTC");
      el.textContent = ago(Date.now(), t);
    }
  }

  function applySummary(sum) {
    const set = (attr, counts) => {
      if (!counts) return;
      let all = 0;
      for (const [k, n] of Object.entries(counts)) {
        all += n;
        const el = document.querySelector("[" + attr + '="' + CSS.escape(k) + '"] strong');
        setText(el, String(n));
      }
      return all;
    };
    set("data-summary-alerts", sum.openAlerts);
    const all = set("data-summary-devices", sum.devices);
    if (all !== undefined) setText(document.querySelector('[data-summary-devices="all"] strong'), String(all));
  }

  document.body.addEventListener("live:fleet", (e) => {
    const d = e.detail || {};
    for (const g of d.devices || []) {
      if (!g || typeof g.id !== "string") continue;
      const row = document.querySelector('tr[data-device-id="' + CSS.escape(g.id) + '"]');
      if (row) applyDevice(row, g);
    }
    if (d.summary) applySummary(d.summary);
  });

  tick();
  setInterval(tick, 1000);
})();
