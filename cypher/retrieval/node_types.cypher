// How many nodes of each type the dataset holds, most first (what the MCP server's `datasets` tool
// lists). One row of parallel lists; a node without a type counts under ''.
MATCH (n:{{dataset}})
WITH coalesce(toStringOrNull(n.{{type}}), '') AS type, count(*) AS nodes
ORDER BY nodes DESC, type
RETURN collect(type) AS types, collect(nodes) AS counts
