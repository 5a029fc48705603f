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

  function drawCharts() {
    if (typeof uPlot === "undefined") return;
    document.querySelectorAll(".charts[data-metrics]").forEach(function (box) {
      var data;
      try { data = JSON.parse(box.getAttribute("data-metrics")); } catch (e) { return; }
      var from = Number(box.getAttribute("data-from")), to = Number(box.getAttribute("data-to"));
      box.querySelectorAll(".chart[data-series]").forEach(function (fig) {
        var name = fig.getAttribute("data-series"), s = series[name], plot = fig.querySelector(".plot");
        if (!s || !data[name]) return;
        plot.textContent = "";
        var width = Math.max(plot.clientWidth, 200);
        var chart = new uPlot({
          width: width, height: 180,
          legend: { show: true },
          scales: { x: { time: true, range: function () { return [from, to]; } }, y: { range: s.range || yRange } },
          axes: [{}, { size: 50, values: function (u, vals) { return vals.map(function (v) { return v + s.unit; }); } }],
          series: [{}, { label: s.label, stroke: s.color, width: 1.5, fill: s.color + "22", points: { show: data.t.length < 60 },
                         value: function (u, v) { return v == null ? "—" : v.toFixed(1) + s.unit; } }]
        }, [data.t, data[name]], plot);
        fig.setAttribute("data-points", String(chart.data[0].length));
        fig._chart = chart;
      });
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
      var plot = fig.querySelector(".plot"), unit = fig.getAttribute("data-unit") || "";
      var from = Number(fig.getAttribute("data-from")), to = Number(fig.getAttribute("data-to"));
      var bool = fig.getAttribute("data-bool") === "true";
      var fmt = function (v) {
        if (v == null) return "—";
        if (bool) return v >= 0.5 ? "on" : "off";
        return Number(v.toPrecision(7)) + (unit ? " " + unit : "");
      };
      plot.textContent = "";
      var color = "#1f5fbf";
      var chart = new uPlot({
        width: Math.max(plot.clientWidth, 200), height: 240,
        legend: { show: true },
        scales: { x: { time: true, range: function () { return [from, to]; } }, y: bool ? { range: [-0.1, 1.1] } : {} },
        axes: [{}, { size: 60, values: function (u, vals) { return vals.map(function (v) { return bool ? (v === 1 ? "on" : v === 0 ? "off" : "") : String(v); }); } }],
        series: [{},
          { label: "max", stroke: color + "55", width: 1, value: function (u, v) { return fmt(v); }, points: { show: false } },
          { label: "avg", stroke: color, width: 2, value: function (u, v) { return fmt(v); }, points: { show: data.t.length < 60 } },
          { label: "min", stroke: color + "55", width: 1, value: function (u, v) { return fmt(v); }, points: { show: false } }],
        bands: [{ series: [1, 3], fill: color + "2e" }]
      }, [data.t, data.max, data.avg, data.min], plot);
      fig.setAttribute("data-points", String(data.t.length));
      fig._chart = chart;
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
    copyButtons();
    selectAll();
    localTimes();
    var t;
    window.addEventListener("resize", function () { clearTimeout(t); t = setTimeout(resizeCharts, 150); });
  });
})();
