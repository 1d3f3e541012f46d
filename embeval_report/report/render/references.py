"""Citations as a reader sees them, and the References appendix.

The package cites its sources in a compact machine form (``seed 000 §217.2``, ``Table 217.2 (seed 000
§217.0.7)``): the seed documents of the project, numbered as in ``metrics.json``'s ``reference`` fields. The
report names them instead: :func:`cite_markdown`, :func:`cite_html` and :func:`cite_text` rewrite every such
citation of a rendered chapter into ``[Evaluating Embedding Models §217.2]`` (the title linked to its entry in
the References appendix), and a bare ``Table 217.2`` (a table of seed 000, not of this report) into
``[Evaluating Embedding Models, Table 217.2]``. :func:`references_markdown` writes the appendix: the source
documents cited, then the papers cited by author and year (:data:`PAPERS`).
"""
from __future__ import annotations

import html as _html
import re

#: seed number -> (title used in citations, what the document is)
SOURCES = {
    "000": ("Evaluating Embedding Models",
            "Book chapters 216–222: intrinsic evaluation (isotropy, hubness, stability, drift), extrinsic "
            "evaluation (link prediction, node classification, clustering), training diagnostics, production "
            "monitoring, fairness and evaluation at scale; threshold tables 217.1–217.3."),
    "001": ("Embedding Quality Evaluation",
            "Book chapter 21: isotropy, uniformity and alignment, dimension collapse, retrieval metrics, human "
            "evaluation, recommendation and anomaly metrics, statistical rigor."),
    "002": ("PyTorch-BigGraph: Evaluation",
            "The evaluation page of the PyTorch-BigGraph documentation (Chinese translation): MR, MRR, Hits@k "
            "and AUC over filtered ranks, per bucket then global."),
    "003": ("stability_metrics.py",
            "Documentation of a script measuring the stability of word embeddings across training runs and "
            "tranches: k-NN overlap, pairwise stability, vocabulary-restricted stability, cohort movement."),
    "004": ("nidl uniformity_score",
            "Reference page of nidl.metrics.uniformity_score: the uniformity of Wang & Isola (2020) with its "
            "NumPy and PyTorch semantics."),
}
#: tables numbered 216–222 are seed 000's (its chapters); the report's own tables are numbered 1, 2, ...
_SEED_TABLE = r"Table 2(?:1[6-9]|2[0-2])\.\d+"
_SECTION = r"§\s?\d+(?:\.\d+)*(?:\s?[–-]\s?\d+(?:\.\d+)*)?"
_SECTIONS = rf"{_SECTION}(?:(?:,\s?|\s(?:and|or)\s|/){_SECTION})*"
_SEED = re.compile(
    # seed 000 §217.0.5.2.1; verdict Table 217.2 (seed 000 §217.0.7): one document, one citation
    rf"seed (?P<vseed>000) (?P<vsec>{_SECTIONS}); verdict (?P<vtable>{_SEED_TABLE})"
    rf"(?: \(seed 000 (?P<vtsec>{_SECTIONS})\))?"
    rf"|(?P<table>{_SEED_TABLE}) \(seed (?P<tseed>00\d)(?: (?P<tsec>{_SECTIONS}))?\)"   # Table 217.2 (seed 000 §217.0.7)
    rf"|seed (?P<seed>00\d)(?: (?P<what>{_SECTIONS}|line \d+|{_SEED_TABLE}))?"          # seed 000 §217.2
    rf"|(?<![\w\[])(?P<bare>{_SEED_TABLE})(?![\w\]])")                                   # Table 217.3
_HTML_TAG = re.compile(r"(<[^>]*>)")


def _parts(m: re.Match) -> tuple[str, str]:
    """(seed number, what is cited in it: sections, a table, a line) of one machine citation."""
    if m.group("vseed"):
        return "000", f"{m.group('vsec')}; verdict {m.group('vtable')}" + (
            f", {m.group('vtsec')}" if m.group("vtsec") else "")
    if m.group("table"):
        return m.group("tseed"), m.group("table") + (f", {m.group('tsec')}" if m.group("tsec") else "")
    if m.group("seed"):
        return m.group("seed"), m.group("what") or ""
    return "000", m.group("bare")


def _sub(text: str, fmt) -> str:
    def one(m):
        seed, what = _parts(m)
        if seed not in SOURCES:
            return m.group(0)
        sep = "" if not what else (", " if what.startswith(("Table", "line")) else " ")
        return fmt(seed, SOURCES[seed][0], sep + what)
    return _SEED.sub(one, text)


def cited_sources(text: str) -> set[str]:
    """The seed numbers ``text`` cites in the machine form."""
    return {_parts(m)[0] for m in _SEED.finditer(text or "")}


def cite_text(text: str) -> str:
    """Plain text (a figure caption): ``[Evaluating Embedding Models §217.2]``."""
    return _sub(text, lambda seed, title, rest: f"[{title}{rest}]")


def cite_markdown(text: str) -> str:
    """Pandoc markdown: the title links to its entry in the References appendix."""
    return _sub(text, lambda seed, title, rest: f"\\[[{title}](#ref-seed-{seed}){rest}\\]")


def cite_html(fragment: str) -> str:
    """An HTML fragment: citations in its text (never inside a tag) become linked titles."""
    def text_only(part: str) -> str:
        if part.startswith("<"):
            return part
        return _sub(part, lambda seed, title, rest: f'[<a href="#ref-seed-{seed}">{_html.escape(title)}</a>{rest}]')
    return "".join(text_only(p) for p in _HTML_TAG.split(fragment))


#: papers and tools cited by author and year: (pattern of the in-text citation, the reference)
PAPERS = (
    (r"Abdollahpouri et al\.,? \(?2019", "Abdollahpouri, H., Burke, R., Mobasher, B. (2019). Managing popularity bias in recommender systems with personalized re-ranking. FLAIRS-32."),
    (r"Alain & Bengio,? \(?2017", "Alain, G., Bengio, Y. (2017). Understanding intermediate layers using linear classifier probes. ICLR 2017 (workshop)."),
    (r"Antoniak & Mimno,? \(?2018", "Antoniak, M., Mimno, D. (2018). Evaluating the stability of embedding-based word similarities. Transactions of the Association for Computational Linguistics 6, 107–119."),
    (r"Badilla et al\.,? \(?2020", "Badilla, P., Bravo-Marquez, F., Pérez, J. (2020). WEFE: the word embeddings fairness evaluation framework. IJCAI 2020."),
    (r"Bai & Saranadasa,? \(?1996", "Bai, Z., Saranadasa, H. (1996). Effect of high dimension: by an example of a two sample problem. Statistica Sinica 6, 311–329."),
    (r"Bengio & Grandvalet,? \(?2004", "Bengio, Y., Grandvalet, Y. (2004). No unbiased estimator of the variance of K-fold cross-validation. Journal of Machine Learning Research 5, 1089–1105."),
    (r"Benjamini & Hochberg,? \(?1995", "Benjamini, Y., Hochberg, Y. (1995). Controlling the false discovery rate: a practical and powerful approach to multiple testing. Journal of the Royal Statistical Society B 57(1), 289–300."),
    (r"Bordes et al\.,? \(?2013", "Bordes, A., Usunier, N., Garcia-Durán, A., Weston, J., Yakhnenko, O. (2013). Translating embeddings for modeling multi-relational data. NeurIPS 26."),
    (r"Breunig et al\.,? \(?2000", "Breunig, M. M., Kriegel, H.-P., Ng, R. T., Sander, J. (2000). LOF: identifying density-based local outliers. SIGMOD 2000."),
    (r"Burges et al\.,? \(?2005", "Burges, C., Shaked, T., Renshaw, E., Lazier, A., Deeds, M., Hamilton, N., Hullender, G. (2005). Learning to rank using gradient descent. ICML 2005."),
    (r"Caliskan(?: et al\.|, Bryson & Narayanan),? \(?2017", "Caliskan, A., Bryson, J. J., Narayanan, A. (2017). Semantics derived automatically from language corpora contain human-like biases. Science 356(6334), 183–186."),
    (r"Castells(?: et al\.|, Vargas & Wang),? \(?2011", "Castells, P., Vargas, S., Wang, J. (2011). Novelty and diversity metrics for recommender systems: choice, discovery and relevance. DDR workshop, ECIR 2011."),
    (r"Cohen,? \(?1960", "Cohen, J. (1960). A coefficient of agreement for nominal scales. Educational and Psychological Measurement 20(1), 37–46."),
    (r"Cohen,? \(?(?:1960, )?1968", "Cohen, J. (1968). Weighted kappa: nominal scale agreement with provision for scaled disagreement or partial credit. Psychological Bulletin 70(4), 213–220."),
    (r"Cohen,? \(?1988", "Cohen, J. (1988). Statistical Power Analysis for the Behavioral Sciences, 2nd ed. Lawrence Erlbaum."),
    (r"Conneau et al\.,? \(?2018", "Conneau, A., Lample, G., Ranzato, M., Denoyer, L., Jégou, H. (2018). Word translation without parallel data. ICLR 2018."),
    (r"Davison & Hinkley,? \(?1997", "Davison, A. C., Hinkley, D. V. (1997). Bootstrap Methods and their Application. Cambridge University Press."),
    (r"Dawid & Skene,? \(?1979", "Dawid, A. P., Skene, A. M. (1979). Maximum likelihood estimation of observer error-rates using the EM algorithm. Applied Statistics 28(1), 20–28."),
    (r"Deshpande & Karypis,? \(?2004", "Deshpande, M., Karypis, G. (2004). Item-based top-N recommendation algorithms. ACM Transactions on Information Systems 22(1), 143–177."),
    (r"Dickey & Fuller,? \(?1979", "Dickey, D. A., Fuller, W. A. (1979). Distribution of the estimators for autoregressive time series with a unit root. Journal of the American Statistical Association 74(366), 427–431."),
    (r"Drummond & Holte,? \(?2006", "Drummond, C., Holte, R. C. (2006). Cost curves: an improved method for visualizing classifier performance. Machine Learning 65(1), 95–130."),
    (r"Efron & Tibshirani,? \(?1993", "Efron, B., Tibshirani, R. J. (1993). An Introduction to the Bootstrap. Chapman & Hall."),
    (r"Ethayarajh,? \(?2019", "Ethayarajh, K. (2019). How contextual are contextualized word representations? Comparing the geometry of BERT, ELMo, and GPT-2 embeddings. EMNLP-IJCNLP 2019."),
    (r"Facco et al\.,? \(?2017", "Facco, E., d'Errico, M., Rodriguez, A., Laio, A. (2017). Estimating the intrinsic dimension of datasets by a minimal neighborhood information. Scientific Reports 7, 12140."),
    (r"Fawcett,? \(?2006", "Fawcett, T. (2006). An introduction to ROC analysis. Pattern Recognition Letters 27(8), 861–874."),
    (r"Feldbauer & Flexer,? \(?2019", "Feldbauer, R., Flexer, A. (2019). A comprehensive empirical comparison of hubness reduction in high-dimensional spaces. Knowledge and Information Systems 59, 137–166."),
    (r"Feldbauer et al\.,? \(?2018", "Feldbauer, R., Leodolter, M., Plant, C., Flexer, A. (2018). Fast approximate hubness reduction for large high-dimensional data. IEEE ICBK 2018."),
    (r"Finkelstein et al\.,? \(?2002", "Finkelstein, L., Gabrilovich, E., Matias, Y., Rivlin, E., Solan, Z., Wolfman, G., Ruppin, E. (2002). Placing search in context: the concept revisited. ACM Transactions on Information Systems 20(1), 116–131."),
    (r"Fisher,? \(?1929", "Fisher, R. A. (1929). Tests of significance in harmonic analysis. Proceedings of the Royal Society A 125(796), 54–59."),
    (r"Fleder & Hosanagar,? \(?2009", "Fleder, D., Hosanagar, K. (2009). Blockbuster culture's next rise or fall: the impact of recommender systems on sales diversity. Management Science 55(5), 697–712."),
    (r"Fleiss,? \(?1971", "Fleiss, J. L. (1971). Measuring nominal scale agreement among many raters. Psychological Bulletin 76(5), 378–382."),
    (r"Garrido et al\.,? \(?2023", "Garrido, Q., Balestriero, R., Najman, L., LeCun, Y. (2023). RankMe: assessing the downstream performance of pretrained self-supervised representations by their rank. ICML 2023."),
    (r"Golub & Van Loan,? \(?2013", "Golub, G. H., Van Loan, C. F. (2013). Matrix Computations, 4th ed. Johns Hopkins University Press."),
    (r"Gretton et al\.,? \(?2012", "Gretton, A., Borgwardt, K. M., Rasch, M. J., Schölkopf, B., Smola, A. (2012). A kernel two-sample test. Journal of Machine Learning Research 13, 723–773."),
    (r"Grover & Leskovec,? \(?2016", "Grover, A., Leskovec, J. (2016). node2vec: scalable feature learning for networks. KDD 2016."),
    (r"Gwet,? \(?2008", "Gwet, K. L. (2008). Computing inter-rater reliability and its variance in the presence of high agreement. British Journal of Mathematical and Statistical Psychology 61(1), 29–48."),
    (r"Gwet,? \(?(?:2008, )?2014", "Gwet, K. L. (2014). Handbook of Inter-Rater Reliability, 4th ed. Advanced Analytics."),
    (r"Hamilton et al\.,? \(?2016", "Hamilton, W. L., Leskovec, J., Jurafsky, D. (2016). Diachronic word embeddings reveal statistical laws of semantic change. ACL 2016."),
    (r"Hanley & McNeil,? \(?1982", "Hanley, J. A., McNeil, B. J. (1982). The meaning and use of the area under a receiver operating characteristic (ROC) curve. Radiology 143(1), 29–36."),
    (r"Hardt et al\.,? \(?2016", "Hardt, M., Price, E., Srebro, N. (2016). Equality of opportunity in supervised learning. NeurIPS 29."),
    (r"Hill et al\.,? \(?2015", "Hill, F., Reichart, R., Korhonen, A. (2015). SimLex-999: evaluating semantic models with (genuine) similarity estimation. Computational Linguistics 41(4), 665–695."),
    (r"Hoeffding,? \(?1948", "Hoeffding, W. (1948). A class of statistics with asymptotically normal distribution. Annals of Mathematical Statistics 19(3), 293–325."),
    (r"Holm,? \(?1979", "Holm, S. (1979). A simple sequentially rejective multiple test procedure. Scandinavian Journal of Statistics 6(2), 65–70."),
    (r"Hosmer & Lemeshow,? \(?2000", "Hosmer, D. W., Lemeshow, S. (2000). Applied Logistic Regression, 2nd ed. Wiley."),
    (r"Hoyt et al\.,? \(?2022", "Hoyt, C. T., Berrendorf, M., Galkin, M., Tresp, V., Gyori, B. M. (2022). A unified framework for rank-based evaluation metrics for link prediction in knowledge graphs. arXiv:2203.07544."),
    (r"Hubert & Arabie,? \(?1985", "Hubert, L., Arabie, P. (1985). Comparing partitions. Journal of Classification 2(1), 193–218."),
    (r"Jing et al\.,? \(?2022", "Jing, L., Vincent, P., LeCun, Y., Tian, Y. (2022). Understanding dimensional collapse in contrastive self-supervised learning. ICLR 2022."),
    (r"Jolliffe,? \(?2002", "Jolliffe, I. T. (2002). Principal Component Analysis, 2nd ed. Springer."),
    (r"Järvelin & Kekäläinen,? \(?2002", "Järvelin, K., Kekäläinen, J. (2002). Cumulated gain-based evaluation of IR techniques. ACM Transactions on Information Systems 20(4), 422–446."),
    (r"Kaplan & Meier,? \(?1958", "Kaplan, E. L., Meier, P. (1958). Nonparametric estimation from incomplete observations. Journal of the American Statistical Association 53(282), 457–481."),
    (r"Kaufman & Rousseeuw(?:'s)?,? \(?1990", "Kaufman, L., Rousseeuw, P. J. (1990). Finding Groups in Data: An Introduction to Cluster Analysis. Wiley."),
    (r"Killick(?: et al\.|, Fearnhead & Eckley),? \(?2012", "Killick, R., Fearnhead, P., Eckley, I. A. (2012). Optimal detection of changepoints with a linear computational cost. Journal of the American Statistical Association 107(500), 1590–1598."),
    (r"Kotnis & Nastase,? \(?2017", "Kotnis, B., Nastase, V. (2017). Analysis of the impact of negative sampling on link prediction in knowledge graphs. arXiv:1708.06816."),
    (r"Kowald & Lacic,? \(?2022", "Kowald, D., Lacic, E. (2022). Popularity bias in collaborative filtering-based multimedia recommender systems. BIAS workshop, ECIR 2022."),
    (r"Krichene & Rendle,? \(?2020", "Krichene, W., Rendle, S. (2020). On sampled metrics for item recommendation. KDD 2020."),
    (r"Krippendorff,? \(?2004", "Krippendorff, K. (2004). Content Analysis: An Introduction to Its Methodology, 2nd ed. Sage."),
    (r"Krippendorff,? \(?2011", "Krippendorff, K. (2011). Computing Krippendorff's alpha-reliability. Annenberg School for Communication, University of Pennsylvania."),
    (r"Kwiatkowski et al\.,? \(?1992", "Kwiatkowski, D., Phillips, P. C. B., Schmidt, P., Shin, Y. (1992). Testing the null hypothesis of stationarity against the alternative of a unit root. Journal of Econometrics 54, 159–178."),
    (r"Landis & Koch,? \(?1977", "Landis, J. R., Koch, G. G. (1977). The measurement of observer agreement for categorical data. Biometrics 33(1), 159–174."),
    (r"Lavin & Ahmad,? \(?2015", "Lavin, A., Ahmad, S. (2015). Evaluating real-time anomaly detection algorithms: the Numenta Anomaly Benchmark. IEEE ICMLA 2015."),
    (r"Lee et al\.,? \(?2005", "Lee, M. D., Pincombe, B., Welsh, M. (2005). An empirical evaluation of models of text document similarity. Proceedings of the 27th Annual Conference of the Cognitive Science Society."),
    (r"Lerer et al\.,? \(?2019", "Lerer, A., Wu, L., Shen, J., Lacroix, T., Wehrstedt, L., Bose, A., Peysakhovich, A. (2019). PyTorch-BigGraph: a large-scale graph embedding system. SysML 2019."),
    (r"Levina & Bickel,? \(?2005", "Levina, E., Bickel, P. J. (2005). Maximum likelihood estimation of intrinsic dimension. NeurIPS 17."),
    (r"Levy & Goldberg,? \(?2014", "Levy, O., Goldberg, Y. (2014). Linguistic regularities in sparse and explicit word representations. CoNLL 2014."),
    (r"(?:Liben-Nowell & )?Kleinberg,? \(?2007", "Liben-Nowell, D., Kleinberg, J. (2007). The link-prediction problem for social networks. Journal of the American Society for Information Science and Technology 58(7), 1019–1031."),
    (r"Light,? \(?1971", "Light, R. J. (1971). Measures of response agreement for qualitative data: some generalizations and alternatives. Psychological Bulletin 76(5), 365–377."),
    (r"Liu et al\.,? \(?2008", "Liu, F. T., Ting, K. M., Zhou, Z.-H. (2008). Isolation forest. IEEE ICDM 2008."),
    (r"Longo,? \(?2018", "Longo, C. (2018). recmetrics: a library of metrics for recommender systems (Python package)."),
    (r"Lopez-Paz & Oquab,? \(?2017", "Lopez-Paz, D., Oquab, M. (2017). Revisiting classifier two-sample tests. ICLR 2017."),
    (r"MacKay & Ghahramani,? \(?2005", "MacKay, D. J. C., Ghahramani, Z. (2005). Comments on 'Maximum likelihood estimation of intrinsic dimension' by E. Levina and P. Bickel. University of Cambridge."),
    (r"Manning et al\.,? \(?2008", "Manning, C. D., Raghavan, P., Schütze, H. (2008). Introduction to Information Retrieval. Cambridge University Press."),
    (r"McClish,? \(?1989", "McClish, D. K. (1989). Analyzing a portion of the ROC curve. Medical Decision Making 9(3), 190–195."),
    (r"Mikolov et al\.,? \(?2013", "Mikolov, T., Chen, K., Corrado, G., Dean, J. (2013). Efficient estimation of word representations in vector space. arXiv:1301.3781."),
    (r"Mu(?: et al\.|, Bhat & Viswanath),? \(?2018", "Mu, J., Bhat, S., Viswanath, P. (2018). All-but-the-top: simple and effective postprocessing for word representations. ICLR 2018."),
    (r"Nguyen et al\.,? \(?2016", "Nguyen, T., Rosenberg, M., Song, X., Gao, J., Tiwary, S., Majumder, R., Deng, L. (2016). MS MARCO: a human generated machine reading comprehension dataset. arXiv:1611.09268."),
    (r"Pedregosa et al\.,? \(?2011", "Pedregosa, F., et al. (2011). Scikit-learn: machine learning in Python. Journal of Machine Learning Research 12, 2825–2830."),
    (r"Phipson & Smyth,? \(?2010", "Phipson, B., Smyth, G. K. (2010). Permutation p-values should never be zero: calculating exact p-values when permutations are randomly drawn. Statistical Applications in Genetics and Molecular Biology 9(1), 39."),
    (r"Poursafaei et al\.,? \(?2022", "Poursafaei, F., Huang, S., Pelrine, K., Rabbany, R. (2022). Towards better evaluation for dynamic link prediction. NeurIPS 2022 Datasets and Benchmarks."),
    (r"Prechelt,? \(?1998", "Prechelt, L. (1998). Early stopping — but when? In Neural Networks: Tricks of the Trade, Springer, 55–69."),
    (r"Rabanser et al\.,? \(?2019", "Rabanser, S., Günnemann, S., Lipton, Z. C. (2019). Failing loudly: an empirical study of methods for detecting dataset shift. NeurIPS 32."),
    (r"Radovanović(?: et al\.|, Nanopoulos & Ivanović),? \(?2010", "Radovanović, M., Nanopoulos, A., Ivanović, M. (2010). Hubs in space: popular nearest neighbors in high-dimensional data. Journal of Machine Learning Research 11, 2487–2531."),
    (r"Ramaswamy et al\.,? \(?2000", "Ramaswamy, S., Rastogi, R., Shim, K. (2000). Efficient algorithms for mining outliers from large data sets. SIGMOD 2000."),
    (r"Rousseeuw,? \(?1987", "Rousseeuw, P. J. (1987). Silhouettes: a graphical aid to the interpretation and validation of cluster analysis. Journal of Computational and Applied Mathematics 20, 53–65."),
    (r"Roy & Vetterli,? \(?2007", "Roy, O., Vetterli, M. (2007). The effective rank: a measure of effective dimensionality. EUSIPCO 2007."),
    (r"Rudelson & Vershynin,? \(?2007", "Rudelson, M., Vershynin, R. (2007). Sampling from large matrices: an approach through geometric functional analysis. Journal of the ACM 54(4), 21."),
    (r"Saito & Rehmsmeier,? \(?2015", "Saito, T., Rehmsmeier, M. (2015). The precision-recall plot is more informative than the ROC plot when evaluating binary classifiers on imbalanced datasets. PLOS ONE 10(3), e0118432."),
    (r"Sakai,? \(?2007", "Sakai, T. (2007). Alternatives to bpref. SIGIR 2007."),
    (r"Satterthwaite,? \(?1946", "Satterthwaite, F. E. (1946). An approximate distribution of estimates of variance components. Biometrics Bulletin 2(6), 110–114."),
    (r"Schnitzer et al\.,? \(?2012", "Schnitzer, D., Flexer, A., Schedl, M., Widmer, G. (2012). Local and global scaling reduce hubs in space. Journal of Machine Learning Research 13, 2871–2902."),
    (r"Schönemann,? \(?1966", "Schönemann, P. H. (1966). A generalized solution of the orthogonal Procrustes problem. Psychometrika 31(1), 1–10."),
    (r"Shani & Gunawardana,? \(?2010", "Shani, G., Gunawardana, A. (2010). Evaluating recommendation systems. In Recommender Systems Handbook, Springer."),
    (r"Snow et al\.,? \(?2008", "Snow, R., O'Connor, B., Jurafsky, D., Ng, A. Y. (2008). Cheap and fast — but is it good? Evaluating non-expert annotations for natural language tasks. EMNLP 2008."),
    (r"Spearman,? \(?1904", "Spearman, C. (1904). The proof and measurement of association between two things. American Journal of Psychology 15(1), 72–101."),
    (r"Strehl & Ghosh,? \(?2002", "Strehl, A., Ghosh, J. (2002). Cluster ensembles: a knowledge reuse framework for combining multiple partitions. Journal of Machine Learning Research 3, 583–617."),
    (r"Thakur et al\.,? \(?2021", "Thakur, N., Reimers, N., Rücklé, A., Srivastava, A., Gurevych, I. (2021). BEIR: a heterogeneous benchmark for zero-shot evaluation of information retrieval models. NeurIPS 2021 Datasets and Benchmarks."),
    (r"Van Gysel & de Rijke,? \(?2018", "Van Gysel, C., de Rijke, M. (2018). Pytrec_eval: an extremely fast Python interface to trec_eval. SIGIR 2018."),
    (r"Vinh(?: et al\.|, Epps & Bailey),? \(?2010", "Vinh, N. X., Epps, J., Bailey, J. (2010). Information theoretic measures for clusterings comparison: variants, properties, normalization and correction for chance. Journal of Machine Learning Research 11, 2837–2854."),
    (r"Voorhees,? \(?1999", "Voorhees, E. M. (1999). The TREC-8 question answering track report. TREC-8."),
    (r"Wang & Isola,? \(?2020", "Wang, T., Isola, P. (2020). Understanding contrastive representation learning through alignment and uniformity on the hypersphere. ICML 2020."),
    (r"Welch,? \(?1947", "Welch, B. L. (1947). The generalization of 'Student's' problem when several different population variances are involved. Biometrika 34(1–2), 28–35."),
    (r"Wendlandt(?: et al\.|, Kummerfeld & Mihalcea),? \(?2018", "Wendlandt, L., Kummerfeld, J. K., Mihalcea, R. (2018). Factors influencing the surprising instability of word embeddings. NAACL-HLT 2018."),
    (r"Zhang et al\.,? \(?2012", "Zhang, Y. C., Ó Séaghdha, D., Quercia, D., Jambor, T. (2012). Auralist: introducing serendipity into music recommendation. WSDM 2012."),
    (r"Zhao et al\.,? \(?2021", "Zhao, W. X., et al. (2021). RecBole: towards a unified, comprehensive and efficient framework for recommendation algorithms. CIKM 2021."),
    (r"Zhao et al\.,? \(?2019", "Zhao, Y., Nasrullah, Z., Li, Z. (2019). PyOD: a Python toolbox for scalable outlier detection. Journal of Machine Learning Research 20(96), 1–7."),
    (r"Ziegler et al\.,? \(?2005", "Ziegler, C.-N., McNee, S. M., Konstan, J. A., Lausen, G. (2005). Improving recommendation lists through topic diversification. WWW 2005."),
    (r"Řehůřek & Sojka,? \(?2010", "Řehůřek, R., Sojka, P. (2010). Software framework for topic modelling with large corpora. LREC 2010 Workshop on New Challenges for NLP Frameworks."),
)
_PAPERS = tuple((re.compile(pattern), ref) for pattern, ref in PAPERS)
_WORD_BEFORE = re.compile(r"[\w-]")  # a citation starts a word: no letter, digit, _ or - right before it


def _cites(rx: re.Pattern, text: str) -> bool:
    """Whether ``rx`` matches ``text`` at a position not preceded by ``[\\w-]`` (``(?<![\\w-])rx``). The
    pattern alone starts with its literal author name, which the regex engine finds by a fast scan; a
    leading look-behind made it try every position of the report's text (a second each render)."""
    m = rx.search(text)
    while m is not None and m.start() and _WORD_BEFORE.match(text, m.start() - 1):
        m = rx.search(text, m.start() + 1)
    return m is not None


def cited_papers(text: str) -> list[str]:
    """The references of :data:`PAPERS` that ``text`` cites, in alphabetical order."""
    text = _html.unescape(text or "").replace("\\", "")
    return [ref for rx, ref in _PAPERS if _cites(rx, text)]


def references_markdown(text: str) -> str:
    """The References appendix's body for a report whose text is ``text``: the source documents it cites, then
    the papers; empty when it cites nothing."""
    from ...present.display import escape

    seeds = sorted(cited_sources(text))
    papers = cited_papers(text)
    out = []
    if seeds:
        out.append("## Source documents\n\nThe documents the report's methods, thresholds and checks come from; "
                   "`metrics.json` names them by number (`seed 000 §217.2`: section 217.2 of seed 000).\n")
        out += [f"- [**{escape(SOURCES[s][0])}**]{{#ref-seed-{s}}} (seed {s}). {escape(SOURCES[s][1])}"
                for s in seeds]
    if papers:
        out.append("\n## Papers and tools\n")
        out += [f"- {escape(ref)}" for ref in papers]
    return "\n".join(out)


#: the papers behind a metric's ``reference`` where it names a section of a source document, a tool or a
#: method rather than a paper: (pattern of the reference, the in-text citations of :data:`PAPERS` it rests on)
REFERENCE_PAPERS = (
    (r"§217\.0\.5\.2\.1", ("Golub & Van Loan 2013",)),                       # condition number
    (r"§217\.0\.5\.2\.2", ("Jolliffe 2002",)),                               # participation ratio of the spectrum
    (r"§217\.0\.5\.2\.3|§220\.1 \(isotropy|ΔAPCS", ("Ethayarajh 2019",)),    # APCS, its drift
    (r"§217\.0\.11 \(compute", ("Roy & Vetterli 2007",)),                    # entropy effective dimension
    (r"§217\.0\.11;|§21\.1\.1;", ("Jolliffe 2002",)),                        # variance shares of the spectrum
    (r"§21\.1\.3 \(relative cut", ("Jing et al. 2022",)),                    # dead dimensions
    (r"compute_hubness_metrics", ("Radovanović et al. 2010",)),
    (r"§217\.2\.1\.3 \(exact|§217\.2\.2|pairwise correlation", ("Antoniak & Mimno 2018",)),
    (r"§217\.2\.1\.3|Procrustes", ("Schönemann 1966", "Hamilton et al. 2016")),
    (r"§217\.2\.3\.[2-5]|Table 217\.3.*(?:drift|trend)|cohort movement", ("Hamilton et al. 2016",)),
    (r"anomalous fraction|nominal rate", ("Ramaswamy et al. 2000",)),
    (r"§220\.1 \((?:max_ks|mean_shift|KS)|drift share|domain classifier", ("Rabanser et al. 2019",)),
    (r"domain classifier", ("Lopez-Paz & Oquab 2017",)),
    (r"Welch", ("Welch 1947",)),
    (r"seed 002", ("Lerer et al. 2019", "Bordes et al. 2013")),
    (r"EvalNE|§218\.1\.3", ("Grover & Leskovec 2016",)),
    (r"§218\.2(?:\.5)?\b", ("Poursafaei et al. 2022",)),
    (r"scikit-learn", ("Pedregosa et al. 2011",)),
    (r"§218\.3", ("Alain & Bengio 2017",)),
    (r"normalized_mutual_info", ("Strehl & Ghosh 2002",)),
    (r"§219\.1|EarlyStopping", ("Prechelt 1998",)),
    (r"§219\.2 \(s", ("Kotnis & Nastase 2017",)),
    (r"fairlearn|§222", ("Hardt et al. 2016",)),
    (r"WEAT", ("Caliskan et al. 2017", "Badilla et al. 2020")),
    (r"Cohen's d", ("Cohen 1988",)),
    (r"RecBole", ("Zhao et al. 2021",)),
    (r"(?:map|precision|recall)_at_k|trec_eval (?:recall|P_|map)|R-precision", ("Manning et al. 2008",)),
    (r"trec_eval|pytrec_eval", ("Van Gysel & de Rijke 2018",)),
    (r"recip_rank|mrr@10", ("Voorhees 1999",)),
    (r"MS MARCO", ("Nguyen et al. 2016",)),
    (r"§21\.3\.1 \(pairwise", ("Cohen 1960",)),
    (r"§21\.3\.2", ("Snow et al. 2008",)),
    (r"gini_coefficient", ("Fleder & Hosanagar 2009",)),
    (r"§21\.4\.2 hit_rate", ("Deshpande & Karypis 2004",)),
    (r"§21\.4\.3 \(its baseline", ("Drummond & Holte 2006",)),
    (r"detection_rate_at_false_positive_rate", ("Fawcett 2006",)),
    (r"time_to_detection detection_rate", ("Lavin & Ahmad 2015",)),
    (r"PyOD", ("Zhao et al. 2019",)),
    (r"expected average precision of random", ("Saito & Rehmsmeier 2015",)),
    (r"paired bootstrap", ("Efron & Tibshirani 1993",)),
    (r"TTestPower", ("Cohen 1988",)),
    (r"gensim", ("Řehůřek & Sojka 2010",)),
    (r"seed 003", ("Wendlandt et al. 2018", "Antoniak & Mimno 2018")),
    (r"Hosmer & Lemeshow", ("Hosmer & Lemeshow 2000",)),
)
_REFERENCE_PAPERS = tuple((re.compile(pattern), keys) for pattern, keys in REFERENCE_PAPERS)


def citations(reference: str) -> list[str]:
    """A metric's ``reference`` as citations resolvable outside the project (author, year, title, where): the
    papers it cites (:data:`PAPERS`), then those behind the source-document sections, tools and methods it names
    (:data:`REFERENCE_PAPERS`), then each source document it cites by its title and section; no duplicates."""
    text = reference or ""
    out = cited_papers(text)
    for rx, keys in _REFERENCE_PAPERS:
        if rx.search(text):
            out += [ref for key in keys for ref in cited_papers(key)]
    out += [f"{SOURCES[s][0]}{r} (embeval-report's source document {s})" for s, r in _source_sections(text)]
    return list(dict.fromkeys(out))


def _source_sections(text: str) -> list[tuple[str, str]]:
    """(seed, `` §217.2``/``, Table 217.3``) of each source-document citation in ``text``."""
    out = []
    for m in _SEED.finditer(text):
        seed, what = _parts(m)
        if seed in SOURCES:
            out.append((seed, "" if not what else (", " if what.startswith(("Table", "line")) else " ") + what))
    return out
