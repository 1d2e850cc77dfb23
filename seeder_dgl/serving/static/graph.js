/* The retrieved subgraph drawn in SVG, laid out by d3-force (vendored under static/d3/ and loaded
 * before this file by index.html; nothing is fetched).
 *
 * Nodes are the ranked nodes and edges the triples among them, one edge per ordered pair with its
 * relation names merged. Triples name their ends by id (by name in an answer without ids).
 *
 * The layout: links pull their ends to a distance that grows at hubs (so a hub's many neighbours
 * sit readably around it), nodes repel each other and do not overlap, and a pull towards the centre
 * (stronger on nodes without edges) keeps everything in view. The simulation starts from a spiral
 * in rank order and is ticked to its end before anything is drawn, never on a timer, so the same
 * answer always gives the same picture; the result is then stretched to fill the drawing. Nodes
 * can be dragged (pointer events; the layout is not run again).
 */
(function () {
  "use strict";

  const SVG_NS = "http://www.w3.org/2000/svg";
  const WIDTH = 800;   // the SVG's viewBox; the browser scales it to the panel
  const HEIGHT = 560;
  const MARGIN = 30;
  const STEPS = 300;   // d3's default cooling reaches its end (alpha 0.001) in 300 ticks
  // Tableau 10: ten colours that stay apart from each other and readable on white.
  const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                   "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

  let current = new Map();  // node id -> its <g>, for highlight()

  function hash(text) {
    let h = 0;
    for (const ch of String(text)) h = (h * 31 + ch.codePointAt(0)) >>> 0;
    return h;
  }

  /* Type -> colour. A type's name picks its colour, so it keeps it from one answer to the next;
   * when two types of one answer pick the same colour, the later (alphabetically) takes the next free one. */
  function colourTypes(types) {
    const colours = new Map();
    const taken = new Set();
    for (const type of [...new Set(types)].sort()) {
      let i = hash(type) % PALETTE.length;
      for (let tries = 0; taken.has(i) && tries < PALETTE.length; tries++) i = (i + 1) % PALETTE.length;
      taken.add(i);
      colours.set(type, PALETTE[i]);
    }
    return colours;
  }

  function clamp(value, lo, hi) {
    return Math.min(hi, Math.max(lo, value));
  }

  /* Nodes (by id, in rank order) and edges (one per ordered pair, its relation names merged).
     Triples name their nodes by id (head_id, tail_id); an answer without ids is matched by name. */
  function buildGraph(result) {
    const byId = new Map();
    const byName = new Map();
    result.nodes.forEach((node) => {
      const known = byId.get(node.id);
      if (known) { known.seed = known.seed || Boolean(node.seed); return; }
      const entry = {name: node.name, type: node.type, score: node.score, id: node.id,
                     seed: Boolean(node.seed), rank: byId.size};
      byId.set(node.id, entry);
      if (!byName.has(node.name)) byName.set(node.name, entry);
    });
    const nodes = [...byId.values()];
    const find = (id, name) => (id !== undefined && id !== null ? byId.get(id) : byName.get(name));
    const pairs = new Map();
    for (const triple of result.triples) {
      const source = find(triple.head_id, triple.head);
      const target = find(triple.tail_id, triple.tail);
      if (!source || !target || source === target) continue;
      const key = source.rank + ">" + target.rank;
      if (!pairs.has(key)) pairs.set(key, {source, target, relations: []});
      const edge = pairs.get(key);
      if (!edge.relations.includes(triple.relation)) edge.relations.push(triple.relation);
    }
    const edges = [...pairs.values()];
    // A pair joined both ways gets two curves bent apart, so neither hides the other.
    for (const edge of edges) edge.bent = pairs.has(edge.target.rank + ">" + edge.source.rank);
    return {nodes, edges};
  }

  /* Where each node goes: the simulation runs to the end before anything is drawn. */
  function layout(nodes, edges) {
    const k = 0.6 * Math.sqrt(((WIDTH - 2 * MARGIN) * (HEIGHT - 2 * MARGIN)) / Math.max(nodes.length, 1));
    for (const node of nodes) node.degree = 0;
    for (const edge of edges) {
      edge.source.degree += 1;
      edge.target.degree += 1;
    }
    nodes.forEach((node, i) => {  // a spiral by rank (golden angle): the best-ranked start in the middle
      const angle = i * 2.39996;
      const radius = 0.5 * k * Math.sqrt(i);
      node.x = WIDTH / 2 + radius * Math.cos(angle);
      node.y = HEIGHT / 2 + radius * Math.sin(angle);
    });
    // Links are longer at hubs, so a hub's many neighbours get room on a wider circle around it;
    // d3's default link strength (1 / the smaller degree) keeps a hub from being dragged onto them.
    const hubby = (edge) => Math.sqrt(Math.max(edge.source.degree, edge.target.degree));
    // The centre pull is stronger on nodes without edges: pushed away by everything and held by
    // nothing else, they would drift to the rim and squeeze the rest when the drawing is stretched.
    const pull = (node) => (node.degree ? 0.06 : 0.15);
    const simulation = d3.forceSimulation(nodes)
      .force("link", d3.forceLink(edges).distance((edge) => k * (0.6 + 0.25 * hubby(edge))))
      .force("charge", d3.forceManyBody().strength(-3 * k))  // no cut-off: two hubs' neighbourhoods part
      .force("x", d3.forceX(WIDTH / 2).strength(pull))
      .force("y", d3.forceY(HEIGHT / 2).strength(pull))
      .force("collide", d3.forceCollide((node) => node.r + 10))
      .stop();  // no timer: ticked here, to the end
    simulation.tick(STEPS);
    fit(nodes);
  }

  /* Stretch the layout to fill the drawing (fonts keep their size: only positions move). */
  function fit(nodes) {
    const xs = nodes.map((node) => node.x);
    const ys = nodes.map((node) => node.y);
    const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
    const spread = (lo, hi, size) => (hi - lo > 1 ? (size - 2 * MARGIN) / (hi - lo) : 0);
    const sx = spread(x0, x1, WIDTH);
    const sy = spread(y0, y1, HEIGHT);
    for (const node of nodes) {
      node.x = sx ? MARGIN + (node.x - x0) * sx : WIDTH / 2;
      node.y = sy ? MARGIN + (node.y - y0) * sy : HEIGHT / 2;
    }
  }

  function radius(node, count) {
    return 6 + 8 * (1 - node.rank / Math.max(count, 1));  // better-ranked nodes are drawn larger
  }

  function svgElement(name, attributes, parent) {
    const element = document.createElementNS(SVG_NS, name);
    for (const [key, value] of Object.entries(attributes || {})) element.setAttribute(key, value);
    if (parent) parent.appendChild(element);
    return element;
  }

  /* A quadratic curve from the source's rim to the target's rim (where the arrowhead touches it). */
  function edgeGeometry(edge) {
    const a = edge.source;
    const b = edge.target;
    const dx = b.x - a.x;
    const dy = b.y - a.y;
    const d = Math.max(Math.hypot(dx, dy), 0.01);
    const bend = edge.bent ? 0.18 * d : 0;
    const mx = (a.x + b.x) / 2 - (dy / d) * bend;
    const my = (a.y + b.y) / 2 + (dx / d) * bend;
    const toward = (from, r) => {
      const ux = mx - from.x;
      const uy = my - from.y;
      const length = Math.max(Math.hypot(ux, uy), 0.01);
      return [from.x + (ux / length) * r, from.y + (uy / length) * r];
    };
    const [sx, sy] = toward(a, a.r);
    const [ex, ey] = toward(b, b.r + 2);
    return {
      path: `M${sx.toFixed(1)},${sy.toFixed(1)} Q${mx.toFixed(1)},${my.toFixed(1)} ${ex.toFixed(1)},${ey.toFixed(1)}`,
      labelX: 0.25 * sx + 0.5 * mx + 0.25 * ex,  // the curve's midpoint
      labelY: 0.25 * sy + 0.5 * my + 0.25 * ey,
    };
  }

  function place(nodes, edges) {
    for (const node of nodes) {
      node.g.setAttribute("transform", `translate(${node.x.toFixed(1)},${node.y.toFixed(1)})`);
      const leftward = node.x > WIDTH * 0.75;  // names in the right quarter go left of their node: not cut off
      node.label.setAttribute("x", leftward ? -(node.r + 3) : node.r + 3);
      node.label.setAttribute("text-anchor", leftward ? "end" : "start");
    }
    for (const edge of edges) {
      const geometry = edgeGeometry(edge);
      edge.path.setAttribute("d", geometry.path);
      edge.label.setAttribute("x", geometry.labelX.toFixed(1));
      edge.label.setAttribute("y", geometry.labelY.toFixed(1));
    }
  }

  function svgPoint(svg, event) {
    const point = svg.createSVGPoint();
    point.x = event.clientX;
    point.y = event.clientY;
    return point.matrixTransform(svg.getScreenCTM().inverse());
  }

  function enableDrag(svg, node, redraw) {
    node.g.addEventListener("pointerdown", (event) => {
      event.preventDefault();
      node.g.setPointerCapture(event.pointerId);
      const move = (moved) => {
        const point = svgPoint(svg, moved);
        node.x = clamp(point.x, MARGIN / 2, WIDTH - MARGIN / 2);
        node.y = clamp(point.y, MARGIN / 2, HEIGHT - MARGIN / 2);
        redraw();
      };
      const stop = () => {
        node.g.removeEventListener("pointermove", move);
        node.g.removeEventListener("pointerup", stop);
        node.g.removeEventListener("pointercancel", stop);
      };
      node.g.addEventListener("pointermove", move);
      node.g.addEventListener("pointerup", stop);
      node.g.addEventListener("pointercancel", stop);
    });
  }

  function truncate(text, limit) {
    text = String(text);
    return text.length > limit ? text.slice(0, limit - 1) + "\u2026" : text;
  }

  /* Draw ``result`` (the JSON of POST /retrieve) into ``svg``; returns the type -> colour map. */
  function draw(svg, result) {
    svg.replaceChildren();
    current = new Map();
    const {nodes, edges} = buildGraph(result);
    const colours = colourTypes(nodes.map((node) => node.type));
    if (!nodes.length) {
      const empty = svgElement("text", {x: WIDTH / 2, y: HEIGHT / 2, class: "empty"}, svg);
      empty.textContent = "nothing retrieved";
      return colours;
    }
    for (const node of nodes) node.r = radius(node, nodes.length);
    layout(nodes, edges);
    const defs = svgElement("defs", {}, svg);
    const marker = svgElement("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7,
                                         markerHeight: 7, orient: "auto-start-reverse"}, defs);
    svgElement("path", {d: "M0,0 L10,5 L0,10 z", class: "arrowhead"}, marker);
    const edgeLayer = svgElement("g", {class: "edges"}, svg);
    const labelLayer = svgElement("g", {class: "edge-labels"}, svg);
    const nodeLayer = svgElement("g", {class: "nodes"}, svg);
    for (const edge of edges) {
      edge.path = svgElement("path", {class: "edge", "marker-end": "url(#arrow)"}, edgeLayer);
      edge.label = svgElement("text", {class: "edge-label"}, labelLayer);
      edge.label.textContent = edge.relations.join(", ");
    }
    for (const node of nodes) {
      node.g = svgElement("g", {class: node.seed ? "node seed" : "node", "data-name": node.name,
                                "data-id": node.id, "data-type": node.type}, nodeLayer);
      const title = svgElement("title", {}, node.g);
      title.textContent = `#${node.rank + 1} ${node.name} (${node.type}), score ${Number(node.score).toFixed(3)}` +
                          (node.seed ? ", a seed" : "");
      if (node.seed) svgElement("circle", {class: "seed-ring", r: node.r + 4}, node.g);
      svgElement("circle", {class: "node-dot", r: node.r, fill: colours.get(node.type)}, node.g);
      node.label = svgElement("text", {class: "node-label", y: 4}, node.g);
      node.label.textContent = truncate(node.name, 32);
      current.set(node.id, node.g);
      enableDrag(svg, node, () => place(nodes, edges));
    }
    place(nodes, edges);
    return colours;
  }

  /* Emphasise one node (hovering its row in the ranked list). */
  function highlight(id, on) {
    const g = current.get(id);
    if (g) g.classList.toggle("hot", on);
  }

  window.SeederGraph = {draw, highlight};
})();
