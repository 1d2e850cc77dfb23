"""STaRK SKB loader: exact file format round trip, per-dataset documents, error paths, real question sets."""
from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from loaders import stark
from loaders.kg import DataError, KnowledgeGraph
from loaders.stark import SkbFormatError, fetch_skb, load_skb, load_stark_qa, write_skb

SHARED_QA = Path(__file__).resolve().parents[3] / "shared" / "data" / "stark" / "qa"


def tiny_kg() -> KnowledgeGraph:
    return KnowledgeGraph(
        name="tiny",
        node_names=["Alzheimer disease", "ACHE", "Donepezil", "cholinergic signaling", "lonely node"],
        node_texts=["a disease of memory", "a gene", "a drug for dementia", "a pathway", "nothing links here"],
        node_type=np.array([0, 1, 2, 3, 1]),
        node_type_names=["disease", "gene/protein", "drug", "pathway"],
        edge_src=np.array([0, 1, 2, 3]),
        edge_dst=np.array([1, 3, 1, 0]),
        edge_rel=np.array([0, 1, 2, 0]),
        relation_names=["associated with", "interacts with", "target"],
    )


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message and message
    return message


def test_round_trip_every_node_type_text_and_edge(tmp_path):
    kg = tiny_kg()
    folder = write_skb(kg, tmp_path / "skb")
    assert sorted(p.name for p in folder.iterdir()) == sorted(stark.FILES)
    # The files are STaRK's exact types: pickled dicts and LongTensors.
    edge_index = torch.load(folder / "edge_index.pt")
    assert edge_index.dtype == torch.int64 and tuple(edge_index.shape) == (2, 4)
    with open(folder / "node_info.pkl", "rb") as fh:
        assert isinstance(pickle.load(fh), dict)
    back = load_skb(folder, "tiny")
    assert back.node_names == kg.node_names
    assert back.node_texts == kg.node_texts
    assert back.node_type_names == kg.node_type_names
    assert back.relation_names == kg.relation_names
    np.testing.assert_array_equal(back.node_type, kg.node_type)
    np.testing.assert_array_equal(back.edge_src, kg.edge_src)
    np.testing.assert_array_equal(back.edge_dst, kg.edge_dst)
    np.testing.assert_array_equal(back.edge_rel, kg.edge_rel)


def raw_parts(node_info: dict, node_types: list[int], node_type_dict: dict, edges: list[tuple[int, int, int]],
              edge_type_dict: dict) -> dict:
    return {
        "node_info": node_info,
        "node_types": node_types,
        "node_type_dict": node_type_dict,
        "edge_index": [[e[0] for e in edges], [e[1] for e in edges]],
        "edge_types": [e[2] for e in edges],
        "edge_type_dict": edge_type_dict,
    }


def test_prime_documents_follow_stark(tmp_path):
    node_info = {
        0: {"id": 7, "type": "gene/protein", "name": "ACHE", "source": "NCBI",
            "details": {"name": "acetylcholinesterase", "alias": ["ACEE", "ARACHE"],
                        "interpro": [{"desc": "Carboxylesterase"}, {"desc": "Alpha/Beta hydrolase"}],
                        "generif": [{"text": "binds amyloid"}, {"text": "is inhibited"}],
                        "genomic_pos": [{"chr": "7", "start": 100}], "_score": 3, "entrez_id": 43,
                        "summary": "Hydrolyses acetylcholine."}},
        1: {"id": "DB00843", "type": "drug", "name": "Donepezil", "source": "DrugBank",
            "details": {"description": "A reversible inhibitor.", "half_life": float("nan"), "group": ""}},
        2: {"id": 9, "type": "disease", "name": "Alzheimer disease", "source": "MONDO"},
    }
    parts = raw_parts(node_info, [1, 2, 0], {0: "disease", 1: "gene/protein", 2: "drug"},
                      [(1, 0, 0), (0, 2, 1)], {0: "target", 1: "associated with"})
    kg = load_skb(write_skb(parts, tmp_path), "prime")
    assert kg.node_names == ["ACHE", "Donepezil", "Alzheimer disease"]
    gene, drug, disease = kg.node_texts
    assert gene.startswith("name: ACHE. type: gene/protein. source: NCBI. details: ")
    assert "alias (other gene names): ACEE, ARACHE" in gene
    assert "interpro (protein family and classification information): Carboxylesterase, Alpha/Beta hydrolase" in gene
    assert "generif (PubMed text): binds amyloid; is inhibited" in gene
    assert "genomic_pos (genomic position): chr: 7; start: 100" in gene
    assert "summary (protein summary text): Hydrolyses acetylcholine." in gene
    assert "_score" not in gene and "entrez_id" not in gene  # STaRK skips private and *_id keys
    assert "description: A reversible inhibitor." in drug and "half_life" not in drug and "group" not in drug
    assert disease == "name: Alzheimer disease. type: disease. source: MONDO"
    assert kg.relation_names == ["target", "associated with"]

    with_rel = load_skb(tmp_path, "prime", add_rel=True)
    assert "relations: target: {drug: (Donepezil)}" in with_rel.node_texts[0]


def test_mag_documents_and_builtin_type_dicts(tmp_path):
    node_info = {
        0: {"type": "author", "DisplayName": "Ada Lovelace", "PaperCount": 12, "CitationCount": -1},
        1: {"type": "institution", "DisplayName": "Analytical Society", "PaperCount": -1, "CitationCount": -1},
        2: {"type": "field_of_study", "DisplayName": "Computing", "PaperCount": 5.0, "CitationCount": 9},
        3: {"type": "paper", "title": "Notes on the Engine", "abstract": "We describe\r\n a machine.\n",
            "Date": "1843-01-01", "OriginalVenue": -1, "JournalDisplayName": "Taylor's Memoirs"},
    }
    parts = raw_parts(node_info, [0, 1, 2, 3], stark.MAG_NODE_TYPES, [(0, 1, 0), (3, 2, 2), (0, 3, 3)],
                      stark.MAG_EDGE_TYPES)
    folder = write_skb(parts, tmp_path)
    # The official MAG files carry no type dictionaries; the loader supplies STaRK's.
    (folder / "node_type_dict.pkl").unlink()
    (folder / "edge_type_dict.pkl").unlink()
    kg = load_skb(folder, "mag")
    assert kg.node_names == ["Ada Lovelace", "Analytical Society", "Computing", "Notes on the Engine"]
    assert kg.node_texts[0] == "author name: Ada Lovelace. author paper count: 12"
    assert kg.node_texts[1] == "institution: Analytical Society"
    assert kg.node_texts[2] == "field of study: Computing. field paper count: 5. field citation count: 9"
    assert kg.node_texts[3] == ("paper title: Notes on the Engine. abstract: We describe a machine. "
                                "publication date: 1843-01-01. journal: Taylor's Memoirs")
    assert kg.relation_names[3] == "author___writes___paper"
    # Prime has no such defaults: a missing dictionary is an error there.
    with pytest.raises(SkbFormatError, match="type_dict.pkl is missing"):
        load_skb(folder, "prime")


def test_amazon_documents_in_nested_cache_folder(tmp_path):
    node_info = {
        0: {"title": "Trail Shoe", "brand": "Peakster", "description": ["Light.", "Grippy."],
            "feature": ["Vibram sole", "ASIN B000", ""], "details": {"product_dimensions": "10 x 4 ; 1 pound"},
            "review": [{"summary": "ok", "reviewText": "fine", "vote": None},
                       {"summary": "great", "reviewText": "love it", "vote": "1,204"}],
            "qa": [{"question": "waterproof?", "answer": "no"}]},
        1: {"brand_name": "Peakster"},
        2: {"category_name": "running"},
        3: {"color_name": "blue"},
    }
    parts = raw_parts(node_info, [0, 1, 2, 3], {0: "product", 1: "brand", 2: "category", 3: "color"},
                      [(0, 1, 2), (0, 2, 3), (0, 3, 4)],
                      {0: "also_buy", 1: "also_view", 2: "has_brand", 3: "has_category", 4: "has_color"})
    write_skb(parts, tmp_path / "processed" / "cache" / "brand-category-color")
    kg = load_skb(tmp_path, "amazon")
    assert kg.node_names == ["Trail Shoe", "Peakster", "running", "blue"]
    product = kg.node_texts[0]
    assert product.startswith("product: Trail Shoe. brand: Peakster. dimensions: 10 x 4. weight: 1 pound. "
                              "description: Light. Grippy. features: #1: Vibram sole")
    assert "ASIN" not in product
    assert product.index("great") < product.index("ok")  # most-voted review first
    assert 'question: "waterproof?" answer: "no"' in product
    assert kg.node_texts[1:] == ["brand name: Peakster", "category name: running", "color name: blue"]
    assert kg.node_type_names == ["product", "brand", "category", "color"]


def test_text_cap(tmp_path):
    kg = tiny_kg()
    kg.node_texts[0] = "x" * 10_000
    back = load_skb(write_skb(kg, tmp_path), "tiny", max_text_chars=100)
    assert len(back.node_texts[0]) == 100


@pytest.mark.parametrize("missing", stark.FILES)
def test_missing_file_is_named(tmp_path, missing):
    folder = write_skb(tiny_kg(), tmp_path)
    (folder / missing).unlink()
    with pytest.raises(SkbFormatError) as exc:
        load_skb(folder, "prime")
    message = one_line(exc)
    if missing == "node_info.pkl":
        assert "no node_info.pkl" in message
    else:
        assert f"{missing} is missing" in message
    assert "--source DIR" in message and "seeder-dgl ingest prime" in message


@pytest.mark.parametrize("file", ["node_info.pkl", "edge_type_dict.pkl", "edge_index.pt", "node_types.pt"])
def test_truncated_file_is_named(tmp_path, file):
    folder = write_skb(tiny_kg(), tmp_path)
    data = (folder / file).read_bytes()
    (folder / file).write_bytes(data[: len(data) // 2])
    with pytest.raises(SkbFormatError) as exc:
        load_skb(folder, "tiny")
    message = one_line(exc)
    assert file in message and "truncated" in message


def test_empty_file_is_truncated(tmp_path):
    folder = write_skb(tiny_kg(), tmp_path)
    (folder / "edge_types.pt").write_bytes(b"")
    with pytest.raises(SkbFormatError, match=r"edge_types.pt is empty \(truncated\)"):
        load_skb(folder, "tiny")


def test_bad_edge_id_names_the_edge(tmp_path):
    kg = tiny_kg()
    kg.edge_dst = np.array([1, 3, 9, 0])
    with pytest.raises(SkbFormatError) as exc:
        load_skb(write_skb(kg, tmp_path), "tiny")
    assert "edge 2 (2 -> 9) refers to a node id outside 0..4" in one_line(exc)


def test_shape_and_type_errors(tmp_path):
    kg = tiny_kg()
    folder = write_skb(kg, tmp_path)
    torch.save(torch.zeros(3, dtype=torch.long), folder / "edge_types.pt")
    with pytest.raises(SkbFormatError, match="edge_types.pt has 3 entries but edge_index.pt has 4 edges"):
        load_skb(folder, "tiny")
    write_skb(kg, folder)
    torch.save(torch.zeros(3, 4, dtype=torch.long), folder / "edge_index.pt")
    with pytest.raises(SkbFormatError, match=r"shape \(3, 4\), expected \[2, E\]"):
        load_skb(folder, "tiny")
    write_skb(kg, folder)
    torch.save(torch.tensor([0, 1, 2, 3, 7]), folder / "node_types.pt")
    with pytest.raises(SkbFormatError, match="node 4 has type id 7"):
        load_skb(folder, "tiny")
    write_skb(kg, folder)
    with open(folder / "node_info.pkl", "wb") as fh:
        pickle.dump({0: {}, 1: {}, 2: {}, 3: {}, 5: {}}, fh)
    with pytest.raises(SkbFormatError, match=r"node ids are not 0..4 \(id 4 is missing\)"):
        load_skb(folder, "tiny")


def test_errors_are_data_errors(tmp_path):
    from seeder_dgl.errors import SeederError

    with pytest.raises(DataError) as exc:
        load_skb(tmp_path, "prime")
    assert isinstance(exc.value, SeederError) and isinstance(exc.value, ValueError)


# ---- fetching ---------------------------------------------------------------------------------------
def test_fetch_uses_local_folder_in_place(tmp_path):
    folder = write_skb(tiny_kg(), tmp_path / "mine" / "processed")
    assert fetch_skb("mag", tmp_path / "cache", source=tmp_path / "mine") == folder
    assert not (tmp_path / "cache").exists()


def _zip_folder(folder: Path, zip_path: Path) -> Path:
    with zipfile.ZipFile(zip_path, "w") as archive:
        for file in folder.iterdir():
            archive.write(file, f"processed/{file.name}")
    return zip_path


def test_fetch_unzips_source_zip_atomically(tmp_path):
    zip_path = _zip_folder(write_skb(tiny_kg(), tmp_path / "src"), tmp_path / "processed.zip")
    folder = fetch_skb("mag", tmp_path / "cache", source=zip_path)
    assert folder == tmp_path / "cache" / "mag" / "processed"
    assert fetch_skb("mag", tmp_path / "cache") == folder  # later runs find the unpacked copy
    assert load_skb(folder, "tiny").node_names == tiny_kg().node_names
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")]  # no temp folders left
    # A folder holding processed.zip works too.
    assert fetch_skb("mag", tmp_path / "cache2", source=tmp_path) == tmp_path / "cache2" / "mag" / "processed"


def test_fetch_checks_prime_sizes(tmp_path):
    zip_path = _zip_folder(write_skb(tiny_kg(), tmp_path / "src"), tmp_path / "processed.zip")
    with pytest.raises(SkbFormatError) as exc:
        fetch_skb("prime", tmp_path / "cache", source=zip_path)
    message = one_line(exc)
    assert "the official Prime file has 70,747,199" in message and "node_info.pkl" in message


def test_fetch_network_failure_is_one_line(tmp_path, monkeypatch):
    calls = []

    def offline(**kwargs):
        calls.append(kwargs)
        raise ConnectionError("Failed to resolve 'huggingface.co'\nmore detail")

    monkeypatch.setattr(stark, "hf_hub_download", offline)
    with pytest.raises(SkbFormatError) as exc:
        fetch_skb("prime", tmp_path / "cache")
    message = one_line(exc)
    assert "skb/prime/processed.zip" in message and "--source DIR" in message and "ConnectionError" in message
    assert calls[0]["repo_id"] == "snap-stanford/stark" and calls[0]["repo_type"] == "dataset"
    assert calls[0]["filename"] == "skb/prime/processed.zip"


def test_fetch_download_path_with_fake_hub(tmp_path, monkeypatch):
    zip_path = _zip_folder(write_skb(tiny_kg(), tmp_path / "src"), tmp_path / "processed.zip")
    monkeypatch.setattr(stark, "hf_hub_download", lambda **kwargs: str(zip_path))
    folder = fetch_skb("amazon", tmp_path / "cache")
    assert (folder / "node_info.pkl").is_file()
    monkeypatch.setattr(stark, "hf_hub_download", lambda **kwargs: pytest.fail("cached: no second download"))
    assert fetch_skb("amazon", tmp_path / "cache") == folder


def test_fetch_rejects_unknown_dataset_and_bad_zip(tmp_path):
    with pytest.raises(SkbFormatError, match="unknown STaRK dataset"):
        fetch_skb("wiki", tmp_path)
    bad = tmp_path / "processed.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(SkbFormatError, match="not a readable zip"):
        fetch_skb("mag", tmp_path / "cache", source=bad)


# ---- questions --------------------------------------------------------------------------------------
def write_qa(root: Path, rows: str, splits: dict[str, str]) -> Path:
    (root / "prime" / "stark_qa").mkdir(parents=True)
    (root / "prime" / "split").mkdir()
    (root / "prime" / "stark_qa" / "stark_qa.csv").write_text(rows)
    for name, text in splits.items():
        (root / "prime" / "split" / f"{name}.index").write_text(text)
    return root


def test_qa_csv_with_multiline_query(tmp_path):
    root = write_qa(tmp_path, 'id,query,answer_ids\n3,"two\nlines, with comma",[5]\n8,plain,"[1, 2]"\n',
                    {"train": "8\n", "val": "3", "test": ""})
    qa = load_stark_qa(root, "prime")
    assert qa.queries[3].text == "two\nlines, with comma" and qa.queries[3].answers == [5]
    assert qa.queries[8].answers == [1, 2]
    assert qa.splits == {"train": [8], "val": [3], "test": []}


def test_malformed_csv_row_is_named(tmp_path):
    root = write_qa(tmp_path, "id,query,answer_ids\n1,fine,[1]\n2,broken,[1, 2\n", {"train": "", "val": "",
                                                                                   "test": ""})
    with pytest.raises(SkbFormatError) as exc:
        load_stark_qa(root, "prime")
    message = one_line(exc)
    assert "stark_qa.csv, data row 2: malformed" in message


def test_split_id_not_in_csv(tmp_path):
    root = write_qa(tmp_path, "id,query,answer_ids\n1,fine,[1]\n", {"train": "1\n", "val": "4\n", "test": ""})
    with pytest.raises(SkbFormatError, match=r"val.index, line 1: query id 4 is not in"):
        load_stark_qa(root, "prime")


def test_load_stark_checks_answers_against_graph(tmp_path):
    write_skb(tiny_kg(), tmp_path / "skb")
    write_qa(tmp_path / "qa", "id,query,answer_ids\n1,ok,[4]\n", {"train": "1", "val": "", "test": ""})
    kg, qa = stark.load_stark("prime", tmp_path / "cache", source=tmp_path / "skb", qa_root=tmp_path / "qa")
    assert kg.num_nodes == 5 and qa.split("train")[0].answers == [4]
    (tmp_path / "qa" / "prime" / "stark_qa" / "stark_qa.csv").write_text("id,query,answer_ids\n1,ok,[5]\n")
    with pytest.raises(SkbFormatError, match="query 1 of prime has answer id 5, outside the graph's 0..4"):
        stark.load_stark("prime", tmp_path / "cache", source=tmp_path / "skb", qa_root=tmp_path / "qa")


def test_missing_qa_folder(tmp_path):
    with pytest.raises(SkbFormatError, match="SEEDER_STARK_QA=DIR"):
        load_stark_qa(tmp_path, "mag")


@pytest.mark.skipif(not SHARED_QA.is_dir(), reason="../shared/data/stark is not on this machine")
def test_real_stark_question_sets():
    prime = load_stark_qa(None, "prime")  # default root is ../shared/data/stark/qa
    assert len(prime.queries) == 11_204
    assert [len(prime.splits[s]) for s in ("train", "val", "test")] == [6_162, 2_241, 2_801]
    assert all(q.answers for q in prime.queries.values())
    assert len(load_stark_qa(SHARED_QA, "mag").queries) == 13_323
    assert len(load_stark_qa(SHARED_QA, "amazon").queries) == 9_100
