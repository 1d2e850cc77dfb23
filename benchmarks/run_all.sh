#!/usr/bin/env bash
# Every benchmark in one go (`make bench`); results land in benchmarks/results/.
# Needs the local Neo4j (or NEO4J_URI) and MetaQA ingested: `seeder-dgl ingest metaqa`.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DGLBACKEND=pytorch
py=.venv/bin/python
.venv/bin/seeder-dgl neo4j start
.venv/bin/seeder-dgl ingest metaqa
$py benchmarks/bench_ingest.py --keep                                   # Prime-scale ingest
$py benchmarks/bench_retrieval.py --dataset metaqa                      # paper profile, B=150
$py benchmarks/bench_retrieval.py --dataset metaqa --profile deep       # full-text seed, B=500
$py benchmarks/bench_retrieval.py --dataset synthetic_prime_scale       # Prime-scale graph
$py benchmarks/bench_soak.py                                           # 8 clients + upserts + a second ingest, 60 s
$py benchmarks/bench_serve.py                                          # HTTP API end to end (needs a trained metaqa policy)
.venv/bin/seeder-dgl eval metaqa --split val --coverage                  # seeding/depth coverage
