/* harness/check/treewalk.h — one walk over two recorded trees.
 *
 * Every comparison of recorded trees (`fattn diff` over two files, verify's
 * checks over in-memory cases, the --repeat audit of `fattn run`) walks two
 * fh_h5_node trees side by side: attributes merged by name, then children
 * merged by name (both are kept sorted, h5io.h), each name met once with
 * the object on side A, side B or both. What a pair means is the
 * visitor's: which names it skips, what it records, whether it descends.
 * The data of a dataset pair come from a source: the nodes themselves
 * (fh_walk_memory: in-memory trees, for verify and the audit) or a stream from
 * each file in bounded chunks (diff.c); fh_walk_compare_data runs them
 * through one of elemcmp.h's rules.
 *
 * Paths: the walk starts at a root path and joins each child's name with
 * the walk's separator ('/' for run-file paths, '.' for the audit's tensor
 * names); a root of "" gives bare names, a root of "/" gives "/name".
 */
#ifndef FH_HARNESS_TREEWALK_H
#define FH_HARNESS_TREEWALK_H

#include <stdbool.h>
#include <stddef.h>

#include "elemcmp.h"
#include "h5io.h"

/* Longest path a walk builds: FH_H5_MAX_DEPTH names of at most
 * FH_H5_NAME_MAX bytes and their separators, plus a root. */
#define FH_WALK_PATH_MAX ((FH_H5_MAX_DEPTH + 2) * (FH_H5_NAME_MAX + 1))

/* One name met by the walk: the objects on each side (NULL where absent;
 * never both). */
typedef struct fh_walk_at {
    const char *path;
    const char *name;          /* the last component ("" or the root path at the root) */
    const fh_h5_node *a, *b;
    int depth;                 /* 0 at the root of the walk */
    bool priv;                 /* an `_impl` group or below one */
    const struct fh_walk_at *up; /* the parent pair; NULL at the root */
} fh_walk_at;

typedef enum fh_walk_next {
    FH_WALK_SKIP = 0,          /* the pair is done */
    FH_WALK_DESCEND            /* walk it as a group pair: attributes, then children */
} fh_walk_next;

/* Callbacks; any may be NULL (attr NULL: no attribute pass; child NULL:
 * children are not visited). */
typedef struct fh_walk_visitor {
    /* one attribute name of the objects at `at` (a or b NULL where absent) */
    void (*attr)(void *ctx, const fh_walk_at *at, const fh_h5_attr *a,
                 const fh_h5_attr *b);
    /* after the last attribute of the objects at `at` */
    void (*attrs_done)(void *ctx, const fh_walk_at *at);
    /* one child name of the groups being walked */
    fh_walk_next (*child)(void *ctx, const fh_walk_at *at);
    /* after the last child of the group pair at `at` */
    void (*group_done)(void *ctx, const fh_walk_at *at);
    /* true: stop walking (checked before each child), e.g. out of memory */
    bool (*stop)(void *ctx);
} fh_walk_visitor;

typedef struct fh_walk {
    const fh_walk_visitor *v;
    void *ctx;
    char sep;                  /* '/' or '.' */
} fh_walk;

/* The pair at the root of a walk. */
fh_walk_at fh_walk_root(const char *path, const fh_h5_node *a, const fh_h5_node *b);

/* Walk the pair at `at` as groups: its attributes (attr, attrs_done), then
 * its children (child, recursing where it says DESCEND), then group_done.
 * A side that is NULL or a dataset has no children. */
void fh_walk_group(const fh_walk *w, const fh_walk_at *at);

/* Only the attribute pass of the pair at `at` (e.g. a dataset pair's). */
void fh_walk_attrs(const fh_walk *w, const fh_walk_at *at);

/* ---- the data of a dataset pair ----------------------------------------------- */

/* Where the bytes of a dataset come from. */
typedef struct fh_walk_source {
    void *ctx;
    /* start reading dataset `n` at `path` on side 0 (A) or 1 (B) */
    fattn_status (*open)(void *ctx, int side, const char *path, const fh_h5_node *n,
                         void **stream);
    /* the next chunk of whole elements (*nbytes, 0 at the end), valid until
     * the next call; two streams of one dtype and shape give chunks of
     * equal sizes */
    fattn_status (*next)(void *stream, const unsigned char **chunk, size_t *nbytes);
    void (*close)(void *stream);
} fh_walk_source;

/* The in-memory source: a node's own data, as one chunk; its streams live
 * in *m (no allocation), one per side. */
typedef struct fh_walk_memory_stream {
    const fh_h5_node *n;
    bool taken;
} fh_walk_memory_stream;

typedef struct fh_walk_memory_state {
    fh_walk_memory_stream side[2];
} fh_walk_memory_state;

fh_walk_source fh_walk_memory(fh_walk_memory_state *m);

/* Compare the data of a dataset pair of one dtype and shape, chunk by
 * chunk, by `rule` into *s (see fh_elem_compare_chunk for want_signal).
 * digest_a / digest_b (NULL: not wanted) get each side's digest of the
 * bytes read. */
fattn_status fh_walk_compare_data(const fh_walk_source *src, const char *path,
                                     const fh_h5_node *a, const fh_h5_node *b,
                                     const fh_elem_cmp *rule, bool want_signal,
                                     fh_elem_stats *s, char *digest_a, char *digest_b);

#endif /* FH_HARNESS_TREEWALK_H */
