// Fleet panel: charts (uPlot), copy buttons, "select all". Loaded as a file
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

  function resizeCharts() {
    document.querySelectorAll(".chart").forEach(function (fig) {
      var plot = fig.querySelector(".plot");
      if (fig._chart && plot) fig._chart.setSize({ width: Math.max(plot.clientWidth, 200), height: 180 });
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

  document.addEventListener("DOMContentLoaded", function () {
    drawCharts();
    copyButtons();
    selectAll();
    var t;
    window.addEventListener("resize", function () { clearTimeout(t); t = setTimeout(resizeCharts, 150); });
  });
})();
