// The blast radius of each run over time (chart.js): minutes unchecked as bars, agents as a line.
(function () {
  "use strict";

  function shortened(label) {
    return label.length > 24 ? label.slice(0, 23) + "\u2026" : label;
  }

  function draw() {
    var canvas = document.getElementById("blast-chart");
    var source = document.getElementById("chart-data");
    if (!canvas || !source || typeof Chart === "undefined") return;
    var data = JSON.parse(source.textContent);
    var chart = new Chart(canvas, {
      data: {
        labels: data.labels,
        datasets: [
          { type: "bar", label: "Minutes unchecked", data: data.minutes, yAxisID: "minutes", backgroundColor: "rgba(179, 38, 30, 0.55)" },
          { type: "line", label: "Agents reached", data: data.agents, yAxisID: "agents", borderColor: "#1d5fa8", backgroundColor: "#1d5fa8", showLine: false, pointRadius: 4 },
          { type: "line", label: "Artifacts", data: data.artifacts, yAxisID: "agents", borderColor: "#7b3fa0", backgroundColor: "#7b3fa0", showLine: false, pointRadius: 4, pointStyle: "rectRot" }
        ]
      },
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: false,
        scales: {
          // A run's key may be 200 characters: the axis shows its start, the tooltip all of it.
          x: { ticks: { callback: function (value) { return shortened(this.getLabelForValue(value)); } } },
          minutes: { type: "linear", position: "left", beginAtZero: true, title: { display: true, text: "minutes" } },
          agents: { type: "linear", position: "right", beginAtZero: true, ticks: { precision: 0 }, grid: { drawOnChartArea: false }, title: { display: true, text: "agents / artifacts" } }
        }
      }
    });
    canvas.dataset.drawn = String(chart.data.labels.length);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
