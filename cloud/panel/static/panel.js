// Fleet panel: charts (uPlot: the device's metrics, a point's buckets), copy buttons, "select all", local times,
// the fields of a rule's condition kind. Loaded as a file
// (the Content-Security-Policy allows no inline script); every page works
// without it, less the charts and the copy buttons.
(function () {
  "use strict";

  var series = {
    cpuPct: { label: "CPU", unit: "%", color: "#1f5fbf", range: [0, 100] },
    memPct: { label: "Memory", unit: "%", color: "#7a3ec2", range: [0, 100] },
    diskUsedPct: { label: "Disk used", unit: "%", color: "#b54708", range: [0, 100] },
    tempCpu: { label: "CPU temperature", unit: "°C", color: "#b42318" },
    loadAvg1: { label: "Load", unit: "", color: "#067647" }
  };

  // yRange starts at 0 and leaves a tenth of headroom above the largest value.
  function yRange(u, min, max) {
    return [0, max > 0 ? max * 1.1 : 1];
  }

  // note shows text (the server's "No samples yet", "No sensor") in place
  // of a figure's plot.
  function note(fig, text) {
    if (fig._chart) { fig._chart.destroy(); fig._chart = null; }
    var plot = fig.querySelector(".plot"), p = document.createElement("p");
    p.className = "empty chart-empty";
    p.textContent = text;
    plot.textContent = "";
    plot.appendChild(p);
    fig.setAttribute("data-points", "0");
  }

  function hasValue(vals) {
    for (var i = 0; i < vals.length; i++) if (vals[i] != null) return true;
    return false;
  }

  // drawMetric draws (or redraws) one device chart from its box's state:
  // "No samples yet" without samples, "No sensor" when no sample has a
  // value (the host lacks the sensor), else the uPlot line.
  function drawMetric(box, fig) {
    var st = box._state, name = fig.getAttribute("data-series"), s = series[name], plot = fig.querySelector(".plot");
    var vals = st.data[name];
    if (!s || !vals) return;
    if (st.data.t.length === 0) { note(fig, "No samples yet"); return; }
    if (!hasValue(vals)) { fig.setAttribute("data-no-sensor", "true"); note(fig, "No sensor"); return; }
    fig.removeAttribute("data-no-sensor");
    if (fig._chart) {
      fig._chart.setData([st.data.t, vals]);
    } else {
      plot.textContent = "";
      fig._chart = new uPlot({
        width: Math.max(plot.clientWidth, 200), height: 180,
        legend: { show: true },
        scales: { x: { time: true, range: function () { return [st.from, st.to]; } }, y: { range: s.range || yRange } },
        axes: [{}, { size: 50, values: function (u, vals) { return vals.map(function (v) { return v + s.unit; }); } }],
        series: [{}, { label: s.label, stroke: s.color, width: 1.5, fill: s.color + "22", points: { show: st.data.t.length < 60 },
                       value: function (u, v) { return v == null ? "—" : v.toFixed(1) + s.unit; } }]
      }, [st.data.t, vals], plot);
    }
    fig.setAttribute("data-points", String(st.data.t.length));
  }

  function drawCharts() {
    if (typeof uPlot === "undefined") return;
    document.querySelectorAll(".charts[data-metrics]").forEach(function (box) {
      var data;
      try { data = JSON.parse(box.getAttribute("data-metrics")); } catch (e) { return; }
      var from = Number(box.getAttribute("data-from")), to = Number(box.getAttribute("data-to"));
      box._state = { data: data, from: from, to: to, span: to - from };
      box.querySelectorAll(".chart[data-series]").forEach(function (fig) { drawMetric(box, fig); });
    });
  }

  // dropBefore removes the leading entries of every column of data whose
  // time is before from (they fell off the left edge of the range).
  function dropBefore(data, from) {
    var n = 0;
    while (n < data.t.length && data.t[n] < from) n++;
    if (n > 0) Object.keys(data).forEach(function (k) { data[k].splice(0, n); });
  }

  // liveFetch fetches el's chart data since its last time (data-url plus
  // since), one request at a time: an update asked for meanwhile runs once
  // the answer is in.
  function liveFetch(el, last, apply) {
    if (el._busy) { el._again = true; return; }
    var url = el.getAttribute("data-url");
    if (!url) return;
    if (last != null) url += "&since=" + encodeURIComponent(String(last));
    el._busy = true;
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) { if (body) apply(body); }, function () {})
      .then(function () {
        el._busy = false;
        if (el._again) { el._again = false; el.dispatchEvent(new CustomEvent("charts:update")); }
      });
  }

  // updateMetrics appends the device's samples since the charts' last one
  // and drops those that fell off the left edge of the range.
  function updateMetrics(box) {
    var st = box._state;
    if (!st) return;
    var t = st.data.t;
    liveFetch(box, t.length ? t[t.length - 1] : null, function (body) {
      var m = body.metrics, last = t.length ? t[t.length - 1] : -Infinity;
      for (var i = 0; i < m.t.length; i++) {
        if (m.t[i] <= last) continue;
        Object.keys(st.data).forEach(function (k) { if (m[k]) st.data[k].push(m[k][i]); });
      }
      st.to = body.to;
      st.from = body.to - st.span;
      dropBefore(st.data, st.from);
      box.setAttribute("data-from", String(st.from));
      box.setAttribute("data-to", String(st.to));
      box.querySelectorAll(".chart[data-series]").forEach(function (fig) { drawMetric(box, fig); });
      var count = document.getElementById("charts-count"), n = st.data.t.length;
      var range = count && count.getAttribute("data-range");
      if (count && range) count.textContent = n ? n + " sample" + (n === 1 ? "" : "s") + " in the last " + range + "." : "No samples in the last " + range + ".";
    });
  }

  // drawPointChart draws a point's buckets: the band from each bucket's
  // minimum to its maximum and the average as a line (data-point-chart:
  // {"t":[...], "min":[...], "max":[...], "avg":[...]}, nulls at gaps).
  function drawPointChart() {
    if (typeof uPlot === "undefined") return;
    document.querySelectorAll(".chart[data-point-chart]").forEach(function (fig) {
      var data;
      try { data = JSON.parse(fig.getAttribute("data-point-chart")); } catch (e) { return; }
      var from = Number(fig.getAttribute("data-from")), to = Number(fig.getAttribute("data-to"));
      fig._state = { data: data, from: from, to: to, span: to - from, step: Number(fig.getAttribute("data-step")) || 0 };
      drawPoint(fig);
    });
  }

  function drawPoint(fig) {
    var st = fig._state, data = st.data, plot = fig.querySelector(".plot"), unit = fig.getAttribute("data-unit") || "";
    if (data.t.length === 0) { note(fig, "No samples yet"); return; }
    if (fig._chart) {
      fig._chart.setData([data.t, data.max, data.avg, data.min]);
      fig.setAttribute("data-points", String(data.t.length));
      return;
    }
    var bool = fig.getAttribute("data-bool") === "true";
    var fmt = function (v) {
      if (v == null) return "—";
      if (bool) return v >= 0.5 ? "on" : "off";
      return Number(v.toPrecision(7)) + (unit ? " " + unit : "");
    };
    plot.textContent = "";
    var color = "#1f5fbf";
    fig._chart = new uPlot({
      width: Math.max(plot.clientWidth, 200), height: 240,
      legend: { show: true },
      scales: { x: { time: true, range: function () { return [st.from, st.to]; } }, y: bool ? { range: [-0.1, 1.1] } : {} },
      axes: [{}, { size: 60, values: function (u, vals) { return vals.map(function (v) { return bool ? (v === 1 ? "on" : v === 0 ? "off" : "") : String(v); }); } }],
      series: [{},
        { label: "max", stroke: color + "55", width: 1, value: function (u, v) { return fmt(v); }, points: { show: false } },
        { label: "avg", stroke: color, width: 2, value: function (u, v) { return fmt(v); }, points: { show: data.t.length < 60 } },
        { label: "min", stroke: color + "55", width: 1, value: function (u, v) { return fmt(v); }, points: { show: false } }],
      bands: [{ series: [1, 3], fill: color + "2e" }]
    }, [data.t, data.max, data.avg, data.min], plot);
    fig.setAttribute("data-points", String(data.t.length));
  }

  // updatePoint refetches the point's buckets from its last one (which may
  // have grown) on, replaces it, appends the newer ones and drops those
  // that fell off the left edge of the range.
  function updatePoint(fig) {
    var st = fig._state;
    if (!st) return;
    var d = st.data;
    liveFetch(fig, d.t.length ? d.t[d.t.length - 1] : null, function (body) {
      var c = body.chart, cols = ["t", "min", "max", "avg"];
      if (c.t.length > 0) {
        var n = d.t.length;
        while (n > 0 && d.t[n - 1] >= c.t[0]) n--;
        cols.forEach(function (k) { d[k].length = n; });
        if (n > 0 && st.step > 0 && c.t[0] - d.t[n - 1] > st.step) {
          // a missing bucket between the two: break the line
          d.t.push(d.t[n - 1] + st.step); d.min.push(null); d.max.push(null); d.avg.push(null);
        }
        cols.forEach(function (k) { Array.prototype.push.apply(d[k], c[k]); });
      }
      st.to = body.to;
      st.from = body.to - st.span;
      dropBefore(d, st.from);
      fig.setAttribute("data-from", String(st.from));
      fig.setAttribute("data-to", String(st.to));
      drawPoint(fig);
    });
  }

  // Live charts: each live:device event (live.js; a test may dispatch its
  // own) fetches what the charts lack.
  function liveCharts() {
    var boxes = document.querySelectorAll(".charts[data-url], .chart[data-point-chart][data-url]");
    if (boxes.length === 0) return;
    boxes.forEach(function (el) {
      el.addEventListener("charts:update", function () {
        if (el.hasAttribute("data-point-chart")) updatePoint(el); else updateMetrics(el);
      });
    });
    document.body.addEventListener("live:device", function () {
      boxes.forEach(function (el) { el.dispatchEvent(new CustomEvent("charts:update")); });
    });
  }

  function resizeCharts() {
    document.querySelectorAll(".chart").forEach(function (fig) {
      var plot = fig.querySelector(".plot");
      if (fig._chart && plot) fig._chart.setSize({ width: Math.max(plot.clientWidth, 200), height: fig._chart.height });
    });
  }

  function copyButtons() {
    document.querySelectorAll("button[data-copy]").forEach(function (btn) {
      btn.addEventListener("click", function () {
        var input = document.getElementById(btn.getAttribute("data-copy"));
        if (!input) return;
        input.select();
        var done = function () { btn.textContent = "Copied"; setTimeout(function () { btn.textContent = "Copy"; }, 2000); };
        if (navigator.clipboard && window.isSecureContext) {
          navigator.clipboard.writeText(input.value).then(done, function () { document.execCommand("copy"); done(); });
        } else {
          document.execCommand("copy");
          done();
        }
      });
    });
  }

  function selectAll() {
    document.querySelectorAll("input[data-select-all]").forEach(function (all) {
      var name = all.getAttribute("data-select-all");
      all.addEventListener("change", function () {
        all.form.querySelectorAll('input[type=checkbox][name="' + name + '"]').forEach(function (c) { c.checked = all.checked; });
      });
    });
  }

  // localTimes shows each time[data-local] (the audit log's, rendered in
  // UTC to the millisecond) in the browser's time zone; its datetime and
  // title keep the full ISO time.
  function localTimes() {
    document.querySelectorAll("time[data-local]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d.getTime())) return;
      var p = function (n, w) { return String(n).padStart(w || 2, "0"); };
      el.textContent = d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + " " + p(d.getHours()) + ":" +
        p(d.getMinutes()) + ":" + p(d.getSeconds()) + "." + p(d.getMilliseconds(), 3);
    });
  }

  // conditionFields shows only the fields of the chosen condition kind of
  // a rule's form (without JavaScript, every kind's fields are shown and the
  // relay reads those of the chosen kind).
  function conditionFields(root) {
    (root || document).querySelectorAll("select[data-kind-select]").forEach(function (sel) {
      var show = function () {
        sel.form.querySelectorAll("fieldset.cond[data-kind]").forEach(function (fs) {
          fs.hidden = fs.getAttribute("data-kind") !== sel.value;
        });
      };
      sel.addEventListener("change", show);
      show();
    });
  }

  // A form marked data-swap-errors is swapped in by htmx also when the relay
  // answers 400 (the form with its errors beside the fields).
  document.addEventListener("htmx:beforeSwap", function (e) {
    var target = e.detail.target;
    if (e.detail.xhr.status === 400 && target && target.hasAttribute && target.hasAttribute("data-swap-errors")) {
      e.detail.shouldSwap = true;
      e.detail.isError = false;
    }
  });
  document.addEventListener("htmx:load", function (e) { conditionFields(e.detail.elt); });

  document.addEventListener("DOMContentLoaded", function () {
    conditionFields();
    drawCharts();
    drawPointChart();
    liveCharts();
    copyButtons();
    selectAll();
    localTimes();
    var t;
    window.addEventListener("resize", function () { clearTimeout(t); t = setTimeout(resizeCharts, 150); });
  });
})();
