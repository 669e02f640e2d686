/* fattn/te_releases.h — the TE releases whose rules the support table
 * knows (fattn/support.h), oldest first: the one list of them.
 *
 * One row each, X(id, name, release, cpp_rev) — name as --te-rules takes
 * it, the wheel's release (the rev of the Python lines cited), and the
 * revision whose C++ (fused_attn.cpp, attention.cpp) was read for it. Rows
 * after the first are preceded by S() (a separator for the lists made from
 * the table). Adding a release is one row here; the support rows hold for a
 * range of releases, so only the rows whose rule or cited line changes are
 * touched (docs/architecture.md, "A TE release").
 *
 * The tools read this file too (tools/te/releases.sh: tools/te/setup.sh
 * fetches every release's wheel, tools/te/gpu-te.sh and test_te.sh run
 * them): keep each row on a line of its own, in the form below.
 */
#ifndef FATTN_TE_RELEASES_H
#define FATTN_TE_RELEASES_H

#define FATTN_TE_RELEASES(X, S)                                                                \
    X(2_19, "2.19", "2.19.0", "2.19.0")                                                        \
    S() X(2_20, "2.20", "2.20.2", "d0067d0")                                                   \
    FATTN_TE_RELEASE_DRY_RUN_(X, S)

/* The recipe's dry run: tests/test_te_release.c builds the table with one
 * more, made-up release, as adding a release does; nothing else defines
 * FATTN_TE_RELEASE_DRY_RUN, so the library never has it. */
#ifdef FATTN_TE_RELEASE_DRY_RUN
#define FATTN_TE_RELEASE_DRY_RUN_(X, S) S() X(9_99, "9.99", "9.99.0", "dryrun0")
#else
#define FATTN_TE_RELEASE_DRY_RUN_(X, S)
#endif

#endif /* FATTN_TE_RELEASES_H */
