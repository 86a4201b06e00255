// The agent page's trust chart: Chart.js, Luxon and its Chart.js adapter (from npm, loaded before
// this file) over the data the page hands over in <script type="application/json"
// id="trust-chart-data"> (json_script), so no inline script is needed and agent-written text
// never reaches HTML unescaped.
(function () {
  "use strict";

  var REGRET = "override_regret";
  var ZOOM_MIN_SPAN = 0.1; // the score axis shows at least this much, so a flat line stays flat
  var HOUR = 3600 * 1000;

  function cssVar(name, fallback) {
    var value = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return value || fallback;
  }

  // The score axis zoomed to the data, with a margin, inside [0, 1]: a change of a few
  // hundredths is visible instead of a line flat across a 0-1 axis.
  function scoreRange(scores) {
    var low = Math.min.apply(null, scores);
    var high = Math.max.apply(null, scores);
    var margin = Math.max((high - low) * 0.15, (ZOOM_MIN_SPAN - (high - low)) / 2, 0.02);
    return {
      min: Math.max(0, Math.floor((low - margin) * 20) / 20),
      max: Math.min(1, Math.ceil((high + margin) * 20) / 20),
    };
  }

  function draw() {
    var canvas = document.getElementById("trust-chart");
    var source = document.getElementById("trust-chart-data");
    if (!canvas || !source || typeof window.Chart === "undefined") {
      return;
    }
    var data = JSON.parse(source.textContent);
    if (data.scores.length === 0) {
      return;
    }
    var accent = cssVar("--accent", "#3b4fc4");
    var muted = cssVar("--muted", "#5b6472");
    var border = cssVar("--border", "#e3e6ea");
    var danger = cssVar("--danger", "#b42318");
    var points = data.scores.map(function (score, i) {
      return { x: data.times[i], y: score, index: i };
    });
    var regrets = points.filter(function (point) {
      return data.reasons[point.index] === REGRET;
    });
    // A drop is drawn in the danger colour, so it stands out on the line.
    var pointColours = data.changes.map(function (change) {
      return change !== null && change < 0 ? danger : accent;
    });
    var range = scoreRange(data.scores);
    // One moment alone would make an axis a millisecond wide: show the day around it.
    var first = data.times[0];
    var last = data.times[data.times.length - 1];
    var lone = last - first < HOUR;
    var chart = new window.Chart(canvas, {
      type: "line",
      data: {
        datasets: [
          {
            label: "Trust score",
            data: points,
            borderColor: accent,
            backgroundColor: accent,
            pointBackgroundColor: pointColours,
            pointBorderColor: pointColours,
            pointRadius: data.scores.length > 120 ? 0 : 3,
            pointHoverRadius: 5,
            borderWidth: 2,
            stepped: "before",
            tension: 0,
          },
          {
            // Each override marked (or inferred) regretted: a triangle over the line's point.
            label: "Override regretted",
            data: regrets,
            showLine: false,
            pointStyle: "triangle",
            pointRadius: 7,
            pointHoverRadius: 8,
            borderColor: danger,
            backgroundColor: danger,
          },
        ],
      },
      options: {
        animation: false,
        maintainAspectRatio: false,
        parsing: false,
        interaction: { mode: "nearest", axis: "x", intersect: false },
        scales: {
          y: {
            min: range.min,
            max: range.max,
            ticks: { color: muted },
            grid: { color: border },
            title: { display: true, text: "Trust score", color: muted },
          },
          x: {
            type: "time",
            bounds: "data",
            min: lone ? first - 12 * HOUR : undefined,
            max: lone ? last + 12 * HOUR : undefined,
            // Every page shows times in UTC; so does the axis, whatever the browser's zone.
            adapters: { date: { zone: "UTC" } },
            time: {
              tooltipFormat: "yyyy-MM-dd HH:mm 'UTC'",
              displayFormats: {
                minute: "HH:mm",
                hour: "d LLL HH:mm",
                day: "d LLL",
                week: "d LLL",
                month: "LLL yyyy",
              },
            },
            ticks: { color: muted, maxRotation: 0, autoSkip: true, maxTicksLimit: 8 },
            grid: { display: false },
            title: { display: true, text: "Time (UTC)", color: muted },
          },
        },
        plugins: {
          legend: {
            display: regrets.length > 0,
            labels: { color: muted, usePointStyle: true },
          },
          tooltip: {
            callbacks: {
              // Chart.js draws tooltip text on the canvas: nothing here is parsed as HTML.
              afterLabel: function (item) {
                var index = item.raw.index;
                var change = data.changes[index];
                var lines = ["Reason: " + data.reasons[index]];
                if (change !== null) {
                  lines.push("Change: " + (change > 0 ? "+" : "") + change.toFixed(3));
                }
                return lines;
              },
            },
          },
        },
      },
    });
    canvas.dataset.drawn = "true";
    canvas.dataset.points = String(chart.data.datasets[0].data.length);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
