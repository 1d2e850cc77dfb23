// Point a dataset's record at the run folder whose trained retriever (retriever.json beside
// best.pt) `query`, `serve` and `eval` use for the retrieval profile it was trained with
// (`seeder-dgl train`).
MATCH (m:SeederDataset {name: $name})
SET m.active_run = $run, m.active_run_profile = $profile, m.active_run_at = datetime()
RETURN m.name AS name
