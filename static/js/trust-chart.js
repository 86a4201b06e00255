// The agent page's trust chart: Chart.js (from npm, loaded before this file) over the data the
// page hands over in <script type="application/json" id="trust-chart-data"> (json_script), so no
// inline script is needed and agent-written text never reaches HTML unescaped.
(function () {
  "use strict";

  function cssVar(name, fallback) {
    var value = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return value || fallback;
  }

  function draw() {
    var canvas = document.getElementById("trust-chart");
    var source = document.getElementById("trust-chart-data");
    if (!canvas || !source || typeof window.Chart === "undefined") {
      return;
    }
    var data = JSON.parse(source.textContent);
    var accent = cssVar("--accent", "#3b4fc4");
    var muted = cssVar("--muted", "#5b6472");
    var border = cssVar("--border", "#e3e6ea");
    var danger = cssVar("--danger", "#b42318");
    // A drop is drawn in the danger colour, so a regretted override stands out on the line.
    var pointColours = data.changes.map(function (change) {
      return change !== null && change < 0 ? danger : accent;
    });
    var chart = new window.Chart(canvas, {
      type: "line",
      data: {
        labels: data.labels,
        datasets: [
          {
            label: "Trust score",
            data: data.scores,
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
        ],
      },
      options: {
        animation: false,
        maintainAspectRatio: false,
        interaction: { mode: "index", intersect: false },
        scales: {
          y: {
            min: 0,
            max: 1,
            ticks: { color: muted },
            grid: { color: border },
            title: { display: true, text: "Trust score", color: muted },
          },
          x: {
            ticks: { color: muted, maxRotation: 0, autoSkip: true, maxTicksLimit: 8 },
            grid: { display: false },
          },
        },
        plugins: {
          legend: { display: false },
          tooltip: {
            callbacks: {
              // Chart.js draws tooltip text on the canvas: nothing here is parsed as HTML.
              afterLabel: function (item) {
                var change = data.changes[item.dataIndex];
                var lines = ["Reason: " + data.reasons[item.dataIndex]];
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
