// Draws a run's task graph with cytoscape and the dagre layout: state as colour (ready, which may
// start now, apart from succeeded, which is done and filled), blockers as a dashed red border and
// in the label. The data comes from a JSON script tag (no inline code).
(function () {
  "use strict";

  var COLOURS = {
    ready: "#0b7285",
    pending: "#8a6d00",
    running: "#1d5fa8",
    succeeded: "#2e7d32",
    failed: "#b3261e",
    escalated: "#7b3fa0",
    cancelled: "#6b6b6b"
  };

  var FILLS = { ready: "#e6f4f6", succeeded: "#e3f1e4", cancelled: "#f0f0f0" };
  // 11px labels drawn at this zoom or more read at 10px or more.
  var READABLE_ZOOM = 0.9;
  // On a wide screen the whole graph is shown unless that takes boxes too small to tell apart
  // (many tasks in one column): then it starts readable at the top left, like on a phone.
  var OVERVIEW_ZOOM = 0.5;

  function draw() {
    var container = document.getElementById("graph");
    var source = document.getElementById("graph-data");
    if (!container || !source || typeof cytoscape === "undefined") return;
    var data = JSON.parse(source.textContent);
    if (!data.nodes.length) {
      container.classList.add("empty");
      return;
    }
    if (typeof cytoscapeDagre !== "undefined") cytoscape.use(cytoscapeDagre);
    // On a phone the graph runs top to bottom and is never shrunk below a readable size: the
    // reader drags it to move around rather than squinting at a whole graph 390 px wide.
    var narrow = container.clientWidth < 640;
    data.nodes.forEach(function (n) {
      var d = n.data;
      d.caption = d.label + "\n" + d.state + (d.blockers.length ? "\n" + d.blockers.join("\n") : "");
      d.colour = COLOURS[d.state] || "#444";
      d.fill = FILLS[d.state] || "#fff";
      // Sized from the caption (cytoscape's width: "label" is deprecated): 11px text, 10px padding.
      var lines = d.caption.split("\n");
      var longest = Math.max.apply(null, lines.map(function (l) { return l.length; }));
      d.w = Math.round(longest * 6.4 + 20);
      d.h = lines.length * 14 + 20;
    });
    var cy = cytoscape({
      container: container,
      elements: data.nodes.concat(data.edges),
      autoungrabify: true,
      maxZoom: 1.25,
      minZoom: 0.2,
      style: [
        {
          selector: "node",
          style: {
            shape: "round-rectangle",
            "background-color": "data(fill)",
            "border-width": 3,
            "border-color": "data(colour)",
            label: "data(caption)",
            "text-wrap": "wrap",
            "text-valign": "center",
            "font-size": 11,
            color: "#1b1f24",
            width: "data(w)",
            height: "data(h)"
          }
        },
        { selector: 'node[state = "ready"]', style: { "border-width": 4, "border-style": "double" } },
        { selector: "node[?blocked]", style: { "border-style": "dashed", "border-color": "#b3261e" } },
        {
          selector: "edge",
          style: {
            width: 1.5,
            "line-color": "#9aa1a9",
            "target-arrow-color": "#9aa1a9",
            "target-arrow-shape": "triangle",
            "curve-style": "bezier"
          }
        }
      ],
      layout: { name: "preset" }
    });
    var layout = cy.layout({
      name: typeof cytoscapeDagre !== "undefined" ? "dagre" : "breadthfirst",
      rankDir: narrow ? "TB" : "LR",
      nodeSep: 20,
      rankSep: narrow ? 40 : 60,
      fit: true,
      padding: 10
    });
    layout.one("layoutstop", function () {
      if (cy.zoom() < (narrow ? READABLE_ZOOM : OVERVIEW_ZOOM)) {
        // Start at the top left (where the run begins), at a size one can read.
        var box = cy.elements().boundingBox();
        cy.zoom(READABLE_ZOOM);
        cy.pan({ x: 8 - box.x1 * READABLE_ZOOM, y: 8 - box.y1 * READABLE_ZOOM });
        var hint = document.getElementById("graph-drag");
        if (hint && !narrow) hint.hidden = false;
      }
      container.dataset.zoom = cy.zoom().toFixed(2);
      container.dataset.drawn = String(cy.nodes().length);
    });
    layout.run();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
