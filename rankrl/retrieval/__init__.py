"""Frozen retrievers behind one interface (``rankrl.retrieval.base.Retriever``).

- ``bm25.PyseriniBM25``: Lucene BM25 through pyserini (Java >= 21, found by ``java``).
- ``bm25s_index.BM25S``: in-process BM25 with a Lucene-like analyzer, for reward loops.
- ``dense.DenseRetriever``: sentence-transformers + faiss (all-MiniLM-L6-v2 by default).
- ``clip.ClipRetriever``: open_clip text -> image with whole-corpus ranks (the source of a rank reward).
- ``keyword_index.KeywordIndex``: an inverted index over keyword sets (overlap retrieval, BM25 over the bags).

Submodules are imported on use: each pulls in a heavy stack (a JVM, torch) that the others do not need.
"""
