/* The engine registry's lookups for the rest of lib/ (not installed). */
#ifndef FATTN_CORE_REGISTRY_H
#define FATTN_CORE_REGISTRY_H

/* The support table's engine bit (FATTN_SUPPORT_ENGINE_*) of a registered
 * kind, 0 for an unknown name. */
unsigned fattn_engine_kind_support_bit(const char *name);

#endif /* FATTN_CORE_REGISTRY_H */
