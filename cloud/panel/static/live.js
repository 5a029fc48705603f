// The panel's live updates (issue 29), owned by the live lane.
//
// Contract for every page script: this file opens one EventSource on
// /panel/live (with the page's subscription from <body data-live="...">,
// e.g. "device=ID") and turns each server-sent event of type T into a DOM
// event "live:T" on document.body, whose detail is the event's data
// parsed as JSON:
//   live:fleet   {devices: [DeviceGlance...], summary: FleetSummary}  changed devices of the organization
//   live:device  DeviceGlance                                         the subscribed device changed (status, last seen, metrics, alerts, channels, points)
//   live:alerts  {}                                                   an alert of the organization opened, changed or closed
//   live:events  {device: id}                                         new events of the subscribed device
//   live:state   {state: "live" | "reconnecting"}                     the connection's state
// htmx fragments refresh with hx-trigger="live:alerts from:body"; scripts
// use document.body.addEventListener("live:device", e => ...).
//
// While the stream is down the banner #live-status ("Reconnecting…",
// role="status") shows and <body data-live-state="reconnecting"> marks
// the page's values as possibly stale. A stream the relay refused (too
// many open, draining) is tried again with backoff up to 30 s; one refused
// because the session ended reloads the page, which leads to sign-in. When
// the browser goes offline the stream is closed and the banner shown at
// once; it reconnects when the browser is online again.
"use strict";
(function () {
  const body = document.body;
  if (!body || !body.hasAttribute("data-live") || typeof EventSource === "undefined") {
    return;
  }
  const sub = body.getAttribute("data-live");
  const url = "/panel/live" + (sub ? "?" + sub : "");
  const types = ["fleet", "device", "alerts", "events"];
  let es = null;
  let state = "";
  let delay = 1000;

  function setState(s) {
    if (s === state) {
      return;
    }
    state = s;
    body.setAttribute("data-live-state", s);
    const banner = document.getElementById("live-status");
    if (banner) {
      banner.hidden = s !== "reconnecting";
    }
    body.dispatchEvent(new CustomEvent("live:state", { detail: { state: s } }));
  }

  let timer = 0;
  function again() {
    clearTimeout(timer);
    timer = setTimeout(connect, delay);
    delay = Math.min(delay * 2, 30000);
  }

  // refused: the relay answered the stream with an error status. A page
  // that now redirects to sign-in means the session ended.
  function refused() {
    fetch(location.href, { method: "HEAD", redirect: "manual", credentials: "same-origin" }).then(function (r) {
      if (r.type === "opaqueredirect") {
        location.reload();
        return;
      }
      again();
    }, again);
  }

  function connect() {
    clearTimeout(timer);
    if (es) {
      es.close();
    }
    const src = new EventSource(url);
    es = src;
    src.onopen = function () {
      delay = 1000;
      setState("live");
    };
    src.onerror = function () {
      if (es !== src) {
        return; // closed and replaced
      }
      setState("reconnecting");
      if (src.readyState === EventSource.CLOSED) {
        es = null;
        refused();
      }
      // Otherwise EventSource reconnects by itself (the stream's retry:).
    };
    types.forEach(function (t) {
      src.addEventListener(t, function (e) {
        let detail;
        try {
          detail = JSON.parse(e.data);
        } catch (_) {
          return;
        }
        body.dispatchEvent(new CustomEvent("live:" + t, { detail: detail }));
      });
    });
  }

  // Without a network the stream is stale at once, not after TCP notices:
  // close it and say so; reconnect as soon as the network is back.
  window.addEventListener("offline", function () {
    clearTimeout(timer);
    if (es) {
      es.close();
      es = null;
    }
    setState("reconnecting");
  });
  window.addEventListener("online", function () {
    delay = 1000;
    connect();
  });

  window.addEventListener("pagehide", function () {
    if (es) {
      es.close();
    }
  });

  // The device page's header: status and last seen.
  function ago(d) {
    const s = Math.max(0, Math.round((Date.now() - d.getTime()) / 1000));
    if (s < 5) {
      return "just now";
    }
    if (s < 60) {
      return s + " s ago";
    }
    if (s < 3600) {
      return Math.floor(s / 60) + " min ago";
    }
    return d.toLocaleString();
  }
  body.addEventListener("live:device", function (e) {
    const g = e.detail || {};
    const st = document.querySelector("[data-live-status] .status");
    if (st && g.status) {
      st.textContent = g.status;
      st.className = "status status-" + String(g.status).toLowerCase();
    }
    const seen = document.querySelector("[data-live-lastseen]");
    if (seen && g.lastSeen) {
      const d = new Date(g.lastSeen);
      const t = document.createElement("time");
      t.setAttribute("datetime", d.toISOString());
      t.setAttribute("title", d.toLocaleString());
      t.setAttribute("data-tick", "");
      t.textContent = ago(d);
      seen.replaceChildren(t);
    }
  });

  connect();
})();
