"""`python -m seeder_dgl.cli ...`: the `seeder-dgl` command without its console script."""
from seeder_dgl.cli import main

main()
