/* config.h - deployment files (configs/ JSON files): one JSON object whose keys are the long names of
 * CLI flags ("gpu-mem": [24, 24] is --gpu-mem 24,24). A command turns the file into argv entries
 * placed BEFORE its own arguments, so its ordinary option parser applies both and the command
 * line wins (the last occurrence of a flag counts). Every key is checked against one table of
 * known flags; an unknown key is an error naming it. The keys are listed in configs/README.md. */
#ifndef HM_CONFIG_H
#define HM_CONFIG_H
#include "util.h"

typedef enum { CONFIG_STRING, CONFIG_INT, CONFIG_NUMBER, CONFIG_BOOL, CONFIG_LIST } config_kind;

/* One known key: its flag is "--" + name; cmds lists the commands that take it, space-separated
 * ("serve generate bench plan"). A CONFIG_BOOL key is a flag without a value. */
typedef struct {
    const char *name;
    config_kind kind;
    const char *cmds;
    const char *about;
} config_key;

/* The table of known keys, terminated by a row with name NULL. */
extern const config_key config_keys[];
const config_key *config_key_find(const char *name);   /* NULL when unknown; '_' reads as '-' */

/* One (key, value) pair of a file: the canonical key name and its value as the flag's argument
 * ("24,24", "stream", "1" / "0" for booleans). */
typedef struct { const config_key *key; char *flag; char *value; } config_kv;   /* flag: "--" + name */

typedef struct { config_kv *kv; int n; char *path; } config_set;

/* Parses a deployment file. Keys starting with '_' are comments and skipped. Returns 0, or -1
 * with e naming the file and the bad key or value (unknown key, wrong JSON type, null, nested
 * object, malformed JSON with its byte offset). Nothing is held on failure. */
int config_load(config_set *c, const char *path, hm_error *e);
/* The same from a string already in memory; name is used in messages. */
int config_parse(config_set *c, const char *json, const char *name, hm_error *e);
void config_free(config_set *c);

/* argv for command cmd: the pairs of c whose key cmd takes ("--key value", or "--key" for a true
 * boolean, nothing for a false one) followed by argv[0..argc). Keys that cmd does not take are
 * left out (one file serves serve, generate and plan). *out_argv is one allocation (free() it);
 * its strings point into c and argv, so keep both alive. Returns the new argc. */
int config_argv(const config_set *c, const char *cmd, int argc, char **argv, char ***out_argv);

/* Finds "--config FILE" in argv, loads it and builds the merged argv with config_argv; argv
 * without --config comes back as a copy. The "--config FILE" pair itself is dropped. Returns the
 * new argc, or -1 with e set. c must be freed with config_free afterwards (also on failure). */
int config_apply(config_set *c, const char *cmd, int argc, char **argv, char ***out_argv, hm_error *e);

#endif
