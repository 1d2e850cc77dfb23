/* The page of `seeder-dgl serve`: ask a question, show the ranked nodes, the subgraph drawn
 * (graph.js) and the triples as text.
 *
 * The address keeps the question (?q=...&method=...&dataset=...&k=...), so an answer can be
 * shared or bookmarked; opening such an address asks the question at once.
 */
(function () {
  "use strict";

  const $ = (id) => document.getElementById(id);
  const form = $("ask");
  const question = $("question");
  const methodSelect = $("method");
  const datasetSelect = $("dataset");
  const kInput = $("k");
  const status = $("status");
  let datasets = [];

  function setStatus(text, isError) {
    status.textContent = text;
    status.classList.toggle("error", Boolean(isError));
  }

  function option(value, text, disabled, title) {
    const element = document.createElement("option");
    element.value = value;
    element.textContent = text;
    element.disabled = Boolean(disabled);
    if (title) element.title = title;
    return element;
  }

  /* The methods the chosen dataset can run; one without a checkpoint is listed, disabled, with the reason. */
  function fillMethods(preferred) {
    const dataset = datasets.find((d) => d.name === datasetSelect.value);
    methodSelect.replaceChildren();
    if (!dataset) return;
    for (const [name, state] of Object.entries(dataset.methods)) {
      const label = state.available ? name : `${name} (unavailable)`;
      methodSelect.appendChild(option(name, label, !state.available, state.reason));
    }
    const wanted = dataset.methods[preferred] && dataset.methods[preferred].available ? preferred : dataset.default_method;
    methodSelect.value = wanted;
  }

  // A server started with --api-key answers 401 until the request carries the key: ask for it
  // once, keep it for this tab only (sessionStorage), and send it with every request.
  async function call(path, options = {}) {
    for (let attempt = 0; attempt < 2; attempt++) {
      const key = sessionStorage.getItem("seederApiKey");
      const headers = Object.assign({}, options.headers || {}, key ? {"X-API-Key": key} : {});
      const response = await fetch(path, Object.assign({}, options, {headers}));
      if (response.status !== 401 || attempt > 0) return response;
      const typed = window.prompt("This server needs its API key (serve --api-key):");
      if (!typed) return response;
      sessionStorage.setItem("seederApiKey", typed);
    }
  }

  async function readJson(response) {
    try {
      return await response.json();
    } catch (error) {
      return {error: `the server answered ${response.status} without JSON`};
    }
  }

  async function loadDatasets(params) {
    const response = await call("datasets");
    const body = await readJson(response);
    if (!response.ok) throw new Error(body.error || `GET datasets answered ${response.status}`);
    datasets = body.datasets;
    for (const dataset of datasets) {
      datasetSelect.appendChild(option(dataset.name, `${dataset.name} (${dataset.nodes.toLocaleString()} nodes)`));
    }
    const wanted = params.get("dataset");
    datasetSelect.value = datasets.some((d) => d.name === wanted) ? wanted : body.default;
    fillMethods(params.get("method"));
  }

  function renderRanked(result, colours) {
    const list = $("ranked");
    list.replaceChildren();
    for (const node of result.nodes) {
      const item = document.createElement("li");
      item.dataset.name = node.name;
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = colours.get(node.type) || "#999";
      const name = document.createElement("span");
      name.className = "name";
      name.textContent = node.name;
      const type = document.createElement("span");
      type.className = "type";
      type.textContent = node.type;
      const score = document.createElement("span");
      score.className = "score";
      score.textContent = Number(node.score).toFixed(3);
      item.append(score, swatch, name, " ", type);  // the score first: it floats right of the wrapped name
      if (node.seed) {
        const badge = document.createElement("span");
        badge.className = "seed-badge";
        badge.textContent = "seed";
        badge.title = "one of the seeds the expansion started from";
        item.appendChild(badge);
      }
      item.addEventListener("mouseenter", () => window.SeederGraph.highlight(node.id, true));
      item.addEventListener("mouseleave", () => window.SeederGraph.highlight(node.id, false));
      list.appendChild(item);
    }
  }

  function renderLegend(colours, hasSeeds) {
    const legend = $("legend");
    legend.replaceChildren();
    for (const [type, colour] of colours) {
      const entry = document.createElement("span");
      entry.className = "legend-entry";
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = colour;
      entry.append(swatch, type);
      legend.appendChild(entry);
    }
    if (hasSeeds) {
      const entry = document.createElement("span");
      entry.className = "legend-entry";
      const ring = document.createElement("span");
      ring.className = "swatch seed-swatch";
      entry.append(ring, "seed");
      legend.appendChild(entry);
    }
  }

  function renderTriples(result) {
    const lines = result.triples.map((t) => `${t.head} -[${t.relation}]-> ${t.tail}`);
    $("triples").textContent = lines.length ? lines.join("\n") : "(no relationships among the retrieved nodes)";
  }

  async function ask() {
    const text = question.value.trim();
    if (!text) {
      setStatus("Type a question first.", true);
      return;
    }
    const request = {question: text, k: Number(kInput.value) || 20, method: methodSelect.value,
                     dataset: datasetSelect.value};
    const params = new URLSearchParams({q: text, method: request.method, dataset: request.dataset, k: request.k});
    history.replaceState(null, "", "?" + params.toString());
    document.body.dataset.state = "asking";
    $("submit").disabled = true;
    setStatus("Retrieving\u2026");
    const started = performance.now();
    try {
      const response = await call("retrieve", {method: "POST", headers: {"Content-Type": "application/json"},
                                               body: JSON.stringify(request)});
      const body = await readJson(response);
      if (!response.ok) {
        document.body.dataset.state = "error";
        setStatus(`Error ${response.status}: ${body.error || "no message"}`, true);
        return;
      }
      const colours = window.SeederGraph.draw($("graph"), body);
      renderRanked(body, colours);
      renderLegend(colours, body.nodes.some((n) => n.seed));
      renderTriples(body);
      const total = performance.now() - started;
      setStatus(`${body.method} on ${request.dataset}: ${body.nodes.length} nodes of ${body.subgraph_size} ` +
                `considered, ${body.triples.length} triples; retrieval ${(body.seconds * 1000).toFixed(0)} ms, ` +
                `whole request ${total.toFixed(0)} ms.`);
      document.body.dataset.state = "done";
    } catch (error) {
      document.body.dataset.state = "error";
      setStatus(`The server did not answer: ${error.message}`, true);
    } finally {
      $("submit").disabled = false;
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    ask();
  });
  datasetSelect.addEventListener("change", () => fillMethods(methodSelect.value));

  async function start() {
    const params = new URLSearchParams(location.search);
    try {
      await loadDatasets(params);
    } catch (error) {
      document.body.dataset.state = "error";
      setStatus(`Could not read the datasets: ${error.message}`, true);
      return;
    }
    if (params.get("k")) kInput.value = params.get("k");
    document.body.dataset.state = "ready";
    if (params.get("q")) {
      question.value = params.get("q");
      ask();
    } else {
      question.focus();
    }
  }

  start();
})();
