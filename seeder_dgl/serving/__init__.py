"""``seeder-dgl serve``: the retriever as an HTTP JSON API (FastAPI on uvicorn) and a page at ``/``
that asks a question and draws the retrieved subgraph.

The app is built by :func:`seeder_dgl.serving.app.create_app` from Retriever objects that are
already open, so the command line, tests and your own code can each decide how those are made.
Import it from ``seeder_dgl.serving.app``: this package imports nothing heavy itself.
"""
