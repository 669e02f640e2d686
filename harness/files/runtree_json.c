/* A run-file tree from a JSON manifest and one blob of tensor bytes: how a
 * program in another language hands fattn a tree to write (fattn
 * write-run, tools/python/fattn_runfile.py). See runtree.h. */
#include "runtree.h"

#include <assert.h>
#include <jansson.h>
#include <string.h>

typedef struct manifest_ctx {
    const unsigned char *blob;
    size_t blob_len;
    char where[512]; /* the node being read, for messages */
} manifest_ctx;

static fattn_status bad(const manifest_ctx *c, const char *what)
{
    return fattn_error(FATTN_E_PARSE, "manifest: %s: %s", c->where[0] ? c->where : "/", what);
}

static fattn_status put_attr(manifest_ctx *c, fh_h5_node *n, const json_t *a)
{
    const char *name = json_string_value(json_object_get(a, "name"));
    const char *kind = json_string_value(json_object_get(a, "kind"));
    const json_t *v = json_object_get(a, "value");
    if (!name || !kind)
        return bad(c, "an attribute needs a name and a kind");
    /* as duplicate JSON keys are refused: the last one would win silently */
    if (fh_h5_node_attr(n, name))
        return fattn_error(FATTN_E_PARSE, "manifest: %s: attribute \"%s\" given twice",
                           c->where[0] ? c->where : "/", name);
    if (!strcmp(kind, "string") && json_is_string(v))
        return fh_h5_node_set_string(n, name, json_string_value(v));
    if (!strcmp(kind, "int64") && json_is_integer(v))
        return fh_h5_node_set_int64(n, name, (int64_t)json_integer_value(v));
    if (!strcmp(kind, "uint8") && json_is_integer(v) && json_integer_value(v) >= 0 &&
        json_integer_value(v) <= 255)
        return fh_h5_node_set_uint8(n, name, (uint8_t)json_integer_value(v));
    if (!strcmp(kind, "float32")) {
        /* The bits, so that NaN payloads and -0 survive JSON. */
        const json_t *bits = json_object_get(a, "bits");
        if (!json_is_integer(bits) || json_integer_value(bits) < 0 ||
            json_integer_value(bits) > 0xffffffffLL)
            return bad(c, "a float32 attribute needs its bits as an integer in [0, 2^32)");
        uint32_t u = (uint32_t)json_integer_value(bits);
        float f;
        memcpy(&f, &u, sizeof f);
        return fh_h5_node_set_float32(n, name, f);
    }
    if (!strcmp(kind, "int64_pair") && json_is_array(v) && json_array_size(v) == 2 &&
        json_is_integer(json_array_get(v, 0)) && json_is_integer(json_array_get(v, 1))) {
        int64_t p[2] = {(int64_t)json_integer_value(json_array_get(v, 0)),
                        (int64_t)json_integer_value(json_array_get(v, 1))};
        return fh_h5_node_set_int64_pair(n, name, p);
    }
    return bad(c, "an attribute's kind and value do not fit (string, int64, uint8, float32, "
                  "int64_pair)");
}

static fattn_status put_attrs(manifest_ctx *c, fh_h5_node *n, const json_t *obj)
{
    const json_t *attrs = json_object_get(obj, "attrs");
    if (!attrs)
        return FATTN_OK;
    if (!json_is_array(attrs))
        return bad(c, "\"attrs\" must be an array");
    size_t i;
    const json_t *a;
    json_array_foreach(attrs, i, a) {
        fattn_status st = put_attr(c, n, a);
        if (st != FATTN_OK)
            return st;
    }
    return FATTN_OK;
}

static fattn_status put_dataset(manifest_ctx *c, fh_h5_node *parent, const char *name,
                                const json_t *obj)
{
    fattn_dtype dtype;
    const char *dt = json_string_value(json_object_get(obj, "dtype"));
    const json_t *shape = json_object_get(obj, "shape");
    const json_t *off = json_object_get(obj, "offset"), *nb = json_object_get(obj, "nbytes");
    if (!dt || fattn_dtype_parse(dt, &dtype) != FATTN_OK)
        return bad(c, "a dataset needs a known \"dtype\"");
    if (!json_is_array(shape) || json_array_size(shape) > FATTN_MAX_DIMS)
        return bad(c, "a dataset needs a \"shape\" of at most FATTN_MAX_DIMS extents");
    int64_t dims[FATTN_MAX_DIMS];
    int ndim = (int)json_array_size(shape);
    for (int i = 0; i < ndim; i++) {
        const json_t *d = json_array_get(shape, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return bad(c, "a shape's extents are integers >= 0");
        dims[i] = (int64_t)json_integer_value(d);
    }
    if (!json_is_integer(off) || !json_is_integer(nb) || json_integer_value(off) < 0 ||
        json_integer_value(nb) < 0 ||
        (uint64_t)json_integer_value(off) > c->blob_len ||
        (uint64_t)json_integer_value(nb) > c->blob_len - (uint64_t)json_integer_value(off))
        return bad(c, "\"offset\" and \"nbytes\" must lie inside the data file");
    fh_h5_node *d;
    fattn_status st = fh_h5_node_add_bytes(parent, name, dtype, ndim, dims,
                                              c->blob + json_integer_value(off),
                                              (size_t)json_integer_value(nb), &d);
    if (st != FATTN_OK)
        return st;
    return put_attrs(c, d, obj);
}

static fattn_status put_group(manifest_ctx *c, fh_h5_node *g, const json_t *obj, int depth)
{
    if (depth > FH_H5_MAX_DEPTH)
        return bad(c, "nested too deep");
    fattn_status st = put_attrs(c, g, obj);
    const json_t *children = json_object_get(obj, "children");
    if (st != FATTN_OK || !children)
        return st;
    if (!json_is_object(children))
        return bad(c, "\"children\" must be an object");
    size_t at = strlen(c->where);
    const char *name;
    const json_t *child;
    json_object_foreach((json_t *)children, name, child) {
        snprintf(c->where + at, sizeof c->where - at, "/%s", name);
        if (!json_is_object(child))
            st = bad(c, "a node must be an object");
        else if (json_object_get(child, "dtype"))
            st = put_dataset(c, g, name, child);
        else {
            fh_h5_node *sub;
            if ((st = fh_h5_node_group(g, name, &sub)) != FATTN_OK)
                return st;
            st = put_group(c, sub, child, depth + 1);
        }
        if (st != FATTN_OK)
            return st;
        c->where[at] = '\0';
    }
    return FATTN_OK;
}

fattn_status fh_runtree_from_manifest(const char *json, size_t len, const void *blob,
                                         size_t blob_len, fh_h5_node **out)
{
    *out = NULL;
    json_error_t err;
    json_t *doc = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
    /* jansson gives every syntax error a message; an empty one is a failed allocation */
    if (!doc && !err.text[0])
        return fattn_error(FATTN_E_NOMEM, "manifest: out of memory parsing JSON");
    if (!doc)
        return fattn_error(FATTN_E_PARSE, "manifest: line %d column %d: %s", err.line,
                           err.column, err.text);
    manifest_ctx c = {.blob = blob, .blob_len = blob_len, .where = ""};
    fattn_status st;
    const char *schema = json_string_value(json_object_get(doc, "schema"));
    const json_t *root = json_object_get(doc, "root");
    fh_h5_node *tree = NULL;
    if (!schema || strcmp(schema, FH_RUNTREE_MANIFEST_SCHEMA) != 0) {
        st = fattn_error(FATTN_E_PARSE, "manifest: \"schema\" is not \"%s\"",
                         FH_RUNTREE_MANIFEST_SCHEMA);
        goto out;
    }
    if (!json_is_object(root)) {
        st = fattn_error(FATTN_E_PARSE, "manifest: no \"root\" object");
        goto out;
    }
    if ((st = fh_h5_node_new_group("", &tree)) != FATTN_OK ||
        (st = put_group(&c, tree, root, 0)) != FATTN_OK)
        goto out;
    assert(tree && !tree->is_dataset);
    *out = tree;
out:
    json_decref(doc);
    if (st != FATTN_OK)
        fh_h5_node_free(tree);
    return st;
}
