"""The datasets `seeder-dgl` knows by name: where their files come from and their retrieval defaults.

A dataset is a knowledge graph (ingested into Neo4j) plus, for training and evaluation, a
question set. The graph is read from source files only by `ingest`; everything after that reads
Neo4j. Questions are read from their files (they are not part of the graph).
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from loaders.files import find_graph_files, load_graph_files
from loaders.kg import KnowledgeGraph, QASet
from loaders.metaqa import default_root, load_metaqa, load_metaqa_kb, load_metaqa_qa_file
from loaders.questions import NodeResolver, load_question_table
from loaders.stark import fetch_skb, load_skb, load_stark_qa
from loaders.synthetic import relation_tracing
from seeder_dgl.errors import SeederError, check_dataset_name
from seeder_dgl.fileio import atomic_write_json
from seeder_dgl.graphstore.connection import open_driver
from seeder_dgl.graphstore.export import export_names
from seeder_dgl.paths import project_root
from seeder_dgl.settings import settings

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_DEFAULT_MODEL_NAMES = {None, "", "default", "all-MiniLM-L6-v2", DEFAULT_MODEL}


def cache_root() -> Path:
    """Embeddings, exports, subgraphs (``SEEDER_CACHE``, default ``.cache/`` in the project root)."""
    return (settings().cache or project_root() / ".cache").resolve()


def runs_root() -> Path:
    """Checkpoints and their run records (``SEEDER_RUNS``, default ``runs/``)."""
    return (settings().runs or project_root() / "runs").resolve()


def resolve_model(name: str | None) -> str | None:
    """The sentence-transformers model to load: None means the packaged all-MiniLM-L6-v2."""
    return None if name in _DEFAULT_MODEL_NAMES else name


def model_label(name: str | None) -> str:
    """How a model is recorded in Neo4j and run records (portable across machines)."""
    return DEFAULT_MODEL if name in _DEFAULT_MODEL_NAMES else str(name)


@dataclass(frozen=True)
class RetrievalDefaults:
    seeds: int = 3
    """k0: dense seeds."""
    budgets: tuple[int, ...] = (50, 97)
    """b_h per hop of K-hop-with-filtering; B = seeds + sum."""
    seeding: str = "dense"
    """dense (vector index; the paper's tables), fulltext (entity linking on names) or hybrid (fused)."""
    relation_prior: bool = False
    """K-hop scores relations with the dataset's learned relation prior (``retrieval.relation_prior``,
    fitted by ``extract`` on the training questions) instead of sim(q, r)."""
    typed_questions: float = 0.5
    """Share of the training questions ``extract`` types as people do (lower case, a typo in the
    topic's name, no punctuation, random case: ``loaders.perturb``) before it grows their subgraphs,
    so the policy learns from both; the entity linker and relation prior are fitted on every
    training question and a typed variant of each while this is above 0."""
    reworded_questions: float = 0.0
    """Share of the training questions ``extract`` rewords before it grows their subgraphs (the
    topic's name kept): content words swapped for WordNet synonyms no training question uses, each
    with probability ``prior_synonyms`` (``retrieval.extract.reworded_queries``), so the policy,
    like the relation prior, learns from words the questions' templates never had; 0: off. Drawn
    apart from ``typed_questions``: a question may be reworded and typed. Off by default: 0.3 left
    MetaQA's validation Hit@1 and its reworded probe where they were over two seeds (the probe's
    misses are the prior's and answer-type head's reading, which already see synonyms)."""
    prior_folds: int = 0
    """With the relation prior: the training subgraphs are extracted with the prior cross-fitted over
    this many folds of the training questions' wordings (``retrieval.link_training.FoldPriors``), so
    the policy learns from relation terms read from wordings the prior has not seen; 0 or 1: the
    prior fitted on every training question. Off: with 4 folds, one run each, MetaQA's reworded
    questions read no better (Hit@1 0.830 / 0.480 at 1 / 2 hops against 0.838 / 0.522) and MLPQ's
    new wordings 0.838 against 0.821 (lower case), for four more prior fits in ``extract``."""
    partial_names: bool = True
    """Entity linking also matches a name of several words by its last word alone ("what films did
    hanks star in"; ``retrieval.linking.mention_table(partial=True)``), and the training mix names
    people by their surname (``loaders.perturb.PARTIAL_NAMES_MIX``). On: MetaQA's topics named by
    the surname alone went from Hit@1 0.093 / 0.247 to 0.673 / 0.677 (1 / 2 hops), written and typed
    questions within about 0.01 (one typo at 3 hops 0.963 against 0.974); MLPQ's validation Hit@1
    0.926 against 0.913 (training's validation, same seed)."""
    prior_synonyms: float = 0.3
    """The relation prior is also fitted on a copy of each training template with this share of its
    content words swapped for WordNet synonyms no training template uses (``loaders.synonyms``),
    so it reads words the questions' templates never had ("pictures", "penned"); 0: off. At 0.3,
    MetaQA validation questions reworded by ``benchmarks/reworded_metaqa.py``: Hit@1 0.782 / 0.700
    at 1 / 2 hops against 0.838 / 0.578 (Hit@5 0.968 / 0.930 against 0.970 / 0.846); scratch fits of
    the prior on MLPQ read its validation paths 0.850 against 0.852."""


@dataclass
class DatasetSpec:
    name: str
    description: str
    load_graph: Callable[[str | None], KnowledgeGraph]
    """source (folder or None) -> graph."""
    load_questions: Callable[[str | None, KnowledgeGraph | None], QASet] | None
    """(source, graph or None) -> questions; None when the dataset has none."""
    retrieval: RetrievalDefaults = field(default_factory=RetrievalDefaults)
    """The 'paper' profile: dense seeding, what the comparison tables use."""
    extra_profiles: dict[str, RetrievalDefaults] = field(default_factory=dict)
    questions_need_graph: bool = False
    """MetaQA maps answer names to ids through the graph's names."""
    default_profile: str = "paper"
    """The profile every command uses without --profile: the best one on the validation split."""
    builtin: bool = True
    """False for a graph of the user's own, known from its manifest (``dataset.json``)."""
    train_defaults: str | None = None
    """Row of ``training.config.DATASET_DEFAULTS`` its policy starts from (None: its own name, else Prime's)."""
    tunable: bool = False
    """Its retrieval settings are chosen by ``tune`` (a graph of your own); a built-in dataset, stored
    under its own name or another (``ingest metaqa --name x``), keeps the profiles it comes with."""

    @property
    def untuned(self) -> bool:
        """A graph whose settings ``tune`` chooses and has not chosen yet (``extract`` then runs it)."""
        return self.tunable and self.default_profile != TUNED


def _stark(name: str) -> DatasetSpec:
    def graph(source):
        return load_skb(fetch_skb(name, cache_root() / "stark", source), name)

    def questions(source, _kg):
        return load_stark_qa(settings().stark_qa, name)

    seeds = 10 if name == "amazon" else 3
    return DatasetSpec(name, f"STaRK-{name.capitalize()} (download or --source DIR)", graph, questions,
                       RetrievalDefaults(seeds=seeds, budgets=(50, 97)))


def _metaqa() -> DatasetSpec:
    def graph(source):
        root = Path(source) if source else default_root()
        if root is None:
            raise SeederError("no MetaQA folder found: pass --source DIR holding kb.txt and qa/{1,2,3}-hop/dev.txt")
        return load_metaqa_kb(root / "kb.txt")[0]

    def questions(source, _kg):
        return load_metaqa(source)[1]

    # 'deep': one full-text-linked seed and three hops within B = 500, chosen on the
    # validation split of the dev questions (`seeder-dgl eval metaqa --coverage`), with the
    # learned relation prior, which on 1,500 validation questions keeps an answer in the subgraph
    # for 0.987 of them instead of 0.948 (2-hop 1.000 against 0.957, 3-hop 0.965 against 0.904).
    return DatasetSpec("metaqa", "MetaQA WikiMovies KB with 1/2/3-hop questions (../shared/data/metaqa)",
                       graph, questions, RetrievalDefaults(seeds=3, budgets=(50, 97)),
                       extra_profiles={"deep": RetrievalDefaults(seeds=1, budgets=(15, 110, 374), seeding="fulltext",
                                                                 relation_prior=True)},
                       questions_need_graph=True, default_profile="deep")


def _synthetic() -> DatasetSpec:
    def graph(source):
        return relation_tracing(seed=0)[0]

    def questions(source, _kg):
        return relation_tracing(seed=0)[1]

    return DatasetSpec("synthetic", "relation-tracing graph with compositional queries (generated, seed 0)",
                       graph, questions, RetrievalDefaults(seeds=3, budgets=(30, 60, 60)))


DATASETS: dict[str, DatasetSpec] = {s.name: s for s in
                                    (_stark("prime"), _stark("mag"), _stark("amazon"), _metaqa(), _synthetic())}


# ---- datasets of the user's own ----------------------------------------------------------------
# `seeder-dgl ingest NAME --source DIR` (NAME not built in) writes a manifest next to the
# dataset's cache: where its graph and questions came from and, once `seeder-dgl tune` ran, the
# retrieval settings chosen on its validation questions (also stored in its Neo4j record).
MANIFEST = "dataset.json"
TUNED = "tuned"
"""The profile of a dataset's own tuned retrieval settings (``seeder-dgl tune``)."""


PAPER = "paper"
"""The paper's retrieval profile: its cache and run folders carry no profile name (``train``, ``full``)."""


def profile_prefix(profile: str) -> str:
    """What a profile's folders start with: '' for the paper's, 'deep-' for 'deep' ('deep-train', 'deep-full')."""
    return "" if profile == PAPER else f"{profile}-"


def subgraph_dir(dataset: str, profile: str, split: str, cache: Path | None = None) -> Path:
    """``<cache>/<dataset>/subgraphs/<prefix><split>``: the subgraphs ``extract`` cached for a split."""
    return dataset_dir(dataset, cache) / "subgraphs" / f"{profile_prefix(profile)}{split}"


def run_dir(dataset: str, profile: str, name: str = "full") -> Path:
    """``<runs>/<dataset>/<prefix><name>``: a training run's checkpoints and records ('full' or an ablation)."""
    return runs_root() / dataset / f"{profile_prefix(profile)}{name}"


def profile_flag(profile: str) -> str:
    """The command-line option that selects ``profile`` ('' for the paper's, the default of the commands)."""
    return "" if profile == PAPER else f" --profile {profile}"


def dataset_dir(name: str, cache: Path | None = None) -> Path:
    """``<cache>/<name>``: the dataset's exports, subgraphs and manifest (names are validated, so a
    name never reaches outside the cache folder); ``cache``: another cache folder than ``cache_root()``."""
    return (cache or cache_root()) / check_dataset_name(name)


INGEST_RECORD = "ingest.json"
TUNE_RECORD = "tune.json"
DATASET_FOLDER_ENTRIES = frozenset({"export", "subgraphs", INGEST_RECORD, MANIFEST, TUNE_RECORD})
"""What seeder-dgl writes into a dataset's cache folder: ``drop`` removes these and nothing else."""


def remove_dataset_folder(name: str, cache: Path | None = None) -> list[str]:
    """Remove what seeder-dgl keeps for dataset ``name`` in its cache folder (``DATASET_FOLDER_ENTRIES``
    and the temporary files of its atomic writes), then the folder if nothing else is in it.
    Returns the names of the entries left there, which are not seeder-dgl's."""
    folder = dataset_dir(name, cache)
    if not folder.is_dir():
        return []
    left = []
    for entry in sorted(folder.iterdir()):
        ours = entry.name in DATASET_FOLDER_ENTRIES or (entry.name.startswith(".") and entry.name.endswith(".tmp"))
        if not ours:
            left.append(entry.name)
        elif entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    if not left:
        folder.rmdir()
    return left


def read_manifest(name: str) -> dict | None:
    path = dataset_dir(name) / MANIFEST
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SeederError(f"{path} is unreadable ({exc}): ingest the dataset again") from None


def write_manifest(name: str, manifest: dict) -> None:
    atomic_write_json(dataset_dir(name) / MANIFEST, manifest)


def tuned_settings(manifest: dict | None) -> RetrievalDefaults | None:
    chosen = (manifest or {}).get("retrieval")
    if not chosen:
        return None
    return RetrievalDefaults(seeds=int(chosen["seeds"]), budgets=tuple(int(b) for b in chosen["budgets"]),
                             seeding=str(chosen["seeding"]), relation_prior=bool(chosen.get("relation_prior")))


def node_resolver(dataset: str):
    """Names and source ids of the dataset's nodes as Neo4j holds them, for matching question files."""
    with open_driver() as driver:
        return NodeResolver.from_nodes(*export_names(driver, dataset))


def load_user_questions(dataset: str, path: str | os.PathLike) -> QASet:
    """A question file matched to ``dataset``'s own graph: CSV/TSV/JSON lines, or MetaQA's
    ``question [topic]<TAB>a|b`` text format (.txt)."""
    path = Path(path).expanduser()
    resolver = node_resolver(dataset)
    if path.suffix.lower() == ".txt":
        lookup = {name: ids[0] for name, ids in resolver.by_name.items()}
        return load_metaqa_qa_file(path, None, lookup=lookup)
    return load_question_table(path, resolver, dataset)


def user_spec(name: str, manifest: dict) -> DatasetSpec:
    source = manifest.get("source")
    fmt = manifest.get("format", "files")
    if fmt in DATASETS:  # a built-in format stored under another name (ingest metaqa --name x)
        base = DATASETS[fmt]
        return DatasetSpec(name, f"{base.description} from {source}", lambda _s: base.load_graph(source),
                           (lambda s, kg: base.load_questions(s or source, kg)) if base.load_questions else None,
                           base.retrieval, dict(base.extra_profiles), base.questions_need_graph,
                           base.default_profile, builtin=False, train_defaults=fmt)

    def graph(src):
        return load_graph_files(find_graph_files(src or source), name).kg

    def questions(src, _kg):
        path = src or manifest.get("questions")
        if not path:
            raise SeederError(f"{name} has no question file: put questions.csv (question, answers) beside its "
                              "graph files and ingest again, or pass --questions FILE")
        return load_user_questions(name, path)

    tuned = tuned_settings(manifest)
    return DatasetSpec(name, f"your graph from {source}", graph, questions, RetrievalDefaults(),
                       extra_profiles={TUNED: tuned} if tuned else {},
                       default_profile=TUNED if tuned else "paper", builtin=False, train_defaults="generic",
                       tunable=True)


def get_spec(name: str) -> DatasetSpec:
    """A built-in dataset, or one of the user's own that `ingest` recorded."""
    if name in DATASETS:
        return DATASETS[name]
    manifest = read_manifest(name)
    if manifest is not None:
        return user_spec(name, manifest)
    raise SeederError(f"unknown dataset {name!r}: built in are {', '.join(DATASETS)}; a graph of your own is "
                      f"ingested with `seeder-dgl ingest {name} --source DIR`")


def find_spec(name: str) -> DatasetSpec | None:
    """``get_spec`` or None when nothing is known of ``name`` (a graph put in Neo4j by other means)."""
    try:
        return get_spec(name)
    except SeederError:
        return None


def _default_profile(spec: DatasetSpec | None) -> str:
    return spec.default_profile if spec else PAPER


def resolve_profile(dataset: str, profile: str | None = None) -> str:
    """``profile``, or the dataset's default when None (MetaQA: 'deep'; a tuned dataset of your own:
    'tuned'; every other dataset: 'paper')."""
    return _default_profile(find_spec(dataset)) if profile is None else profile


def _profile_settings(dataset: str, spec: DatasetSpec | None, profile: str) -> RetrievalDefaults:
    """The settings of the resolved ``profile``, or a one-line error naming the profiles there are."""
    profiles = {PAPER: spec.retrieval if spec else RetrievalDefaults(), **(spec.extra_profiles if spec else {})}
    if spec is not None and spec.builtin and profile == TUNED:  # a built-in dataset keeps its own default
        tuned = tuned_settings(read_manifest(dataset))
        if tuned:
            profiles[TUNED] = tuned
    if profile not in profiles:
        hint = f"; run `seeder-dgl tune {dataset}` to choose them" if profile == TUNED else ""
        raise SeederError(f"{dataset} has no retrieval profile {profile!r}: choose one of {', '.join(profiles)}{hint}")
    return profiles[profile]


def retrieval_profile(dataset: str, profile: str | None = None) -> RetrievalDefaults:
    """The named retrieval settings of a dataset ('paper' for any dataset, e.g. 'deep' for MetaQA,
    'tuned' for your own after `seeder-dgl tune`); None: the dataset's default profile."""
    spec = find_spec(dataset)
    return _profile_settings(dataset, spec, _default_profile(spec) if profile is None else profile)


@dataclass(frozen=True)
class DatasetContext:
    """A dataset as the commands use it: its retrieval profile, resolved once, and where its files are.

        ds = DatasetContext.open("metaqa")            # profile 'deep', MetaQA's default
        ds.retrieval.budgets, ds.subgraph_dir("train"), ds.run_dir() / "best.pt"

    Paths are derived from the fields, so the layout is written down once (the module functions
    ``dataset_dir``, ``subgraph_dir``, ``run_dir``).
    """

    name: str
    """The dataset's name, validated: a folder name under the cache and the runs, and Neo4j's record name."""
    profile: str
    """The retrieval profile: the one asked for, else the dataset's default ('deep' for MetaQA)."""
    retrieval: RetrievalDefaults
    """The profile's settings: seeding mode, k0, per-hop budgets, whether K-hop follows the relation prior."""
    spec: DatasetSpec | None
    """Where its graph and questions come from; None for a graph put in Neo4j by other means (no manifest)."""
    cache: Path
    """The cache folder it lives under: ``cache_root()`` unless ``open`` was given another."""

    @classmethod
    def open(cls, name: str, profile: str | None = None, cache: str | os.PathLike | None = None) -> "DatasetContext":
        """One-line SeederError for a name that cannot name a dataset, or a profile it does not have."""
        check_dataset_name(name)
        spec = find_spec(name)
        profile = _default_profile(spec) if profile is None else profile
        root = Path(cache).expanduser().resolve() if cache else cache_root()
        return cls(name, profile, _profile_settings(name, spec, profile), spec, root)

    @property
    def builtin(self) -> bool:
        """One of ``DATASETS`` under its own name: its results are the project's (a graph of your own,
        or a built-in one stored under another name, keeps them beside its runs)."""
        return self.spec is not None and self.spec.builtin

    @property
    def cache_dir(self) -> Path:
        """``<cache>/<name>``: exports, subgraphs, manifest and run records of ingest and tune."""
        return dataset_dir(self.name, self.cache)

    @property
    def manifest_path(self) -> Path:
        """``<cache>/<name>/dataset.json``: where a dataset of your own came from, and its tuned settings."""
        return self.cache_dir / MANIFEST

    @property
    def export_dir(self) -> Path:
        """``<cache>/<name>/export``: the graph exported from Neo4j, cached per dataset version."""
        return self.cache_dir / "export"

    def subgraph_dir(self, split: str) -> Path:
        """The subgraphs ``extract`` cached for ``split`` with this profile."""
        return subgraph_dir(self.name, self.profile, split, self.cache)

    @property
    def runs_dir(self) -> Path:
        """``<runs>/<name>``: every training run of the dataset, all profiles."""
        return runs_root() / self.name

    def run_dir(self, name: str = "full") -> Path:
        """A training run of this profile: 'full' (the SeedER policy) or an ablation's name."""
        return run_dir(self.name, self.profile, name)

    @property
    def profile_flag(self) -> str:
        """`` --profile NAME`` for the commands a hint suggests ('' for the paper's profile)."""
        return profile_flag(self.profile)
