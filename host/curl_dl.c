/* libcurl loaded at its first use (see curl_dl.h): dlopen of MOOR_CURL_SONAME
 * once per process (pthread_once), never closed, as curl_global_cleanup is
 * never called (fetch.c). */
#include "curl_dl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifndef MOOR_CURL_SONAME
#define MOOR_CURL_SONAME "libcurl.so.4"
#endif

static char why[512];

/* The stubs: libcurl could not be loaded. */
static CURLcode s_global_init(long flags) { return (void)flags, CURLE_FAILED_INIT; }
static CURL *s_easy_init(void) { return NULL; }
static CURLcode s_easy_setopt(CURL *c, CURLoption opt, ...) { return (void)c, (void)opt, CURLE_FAILED_INIT; }
static CURLcode s_easy_getinfo(CURL *c, CURLINFO info, ...) { return (void)c, (void)info, CURLE_FAILED_INIT; }
static CURLcode s_easy_perform(CURL *c) { return (void)c, CURLE_FAILED_INIT; }
static void s_easy_cleanup(CURL *c) { (void)c; }
static const char *s_strerror(CURLcode code) { return (void)code, why; }
static void s_free(void *p) { (void)p; }
static struct curl_slist *s_slist_append(struct curl_slist *l, const char *s) { return (void)l, (void)s, NULL; }
static void s_slist_free_all(struct curl_slist *l) { (void)l; }
static CURLM *s_multi_init(void) { return NULL; }
static CURLMcode s_multi_setopt(CURLM *m, CURLMoption opt, ...) { return (void)m, (void)opt, CURLM_BAD_HANDLE; }
static CURLMcode s_multi_handle(CURLM *m, CURL *c) { return (void)m, (void)c, CURLM_BAD_HANDLE; }
static CURLMcode s_multi_assign(CURLM *m, curl_socket_t fd, void *p) {
  return (void)m, (void)fd, (void)p, CURLM_BAD_HANDLE;
}
static CURLMcode s_multi_socket_action(CURLM *m, curl_socket_t fd, int ev, int *running) {
  return (void)m, (void)fd, (void)ev, (void)running, CURLM_BAD_HANDLE;
}
static CURLMcode s_multi_perform(CURLM *m, int *running) { return (void)m, (void)running, CURLM_BAD_HANDLE; }
static CURLMcode s_multi_poll(CURLM *m, struct curl_waitfd *fds, unsigned n, int ms, int *numfds) {
  return (void)m, (void)fds, (void)n, (void)ms, (void)numfds, CURLM_BAD_HANDLE;
}
static CURLMsg *s_multi_info_read(CURLM *m, int *left) { return (void)m, (void)left, NULL; }
static CURLMcode s_multi_cleanup(CURLM *m) { return (void)m, CURLM_BAD_HANDLE; }
static const char *s_multi_strerror(CURLMcode code) { return (void)code, why; }
static CURLU *s_url(void) { return NULL; }
static void s_url_cleanup(CURLU *u) { (void)u; }
static CURLUcode s_url_get(const CURLU *u, CURLUPart what, char **part, unsigned int flags) {
  return (void)u, (void)what, (void)part, (void)flags, CURLUE_OUT_OF_MEMORY;
}
static CURLUcode s_url_set(CURLU *u, CURLUPart what, const char *part, unsigned int flags) {
  return (void)u, (void)what, (void)part, (void)flags, CURLUE_OUT_OF_MEMORY;
}
static const char *s_url_strerror(CURLUcode code) { return (void)code, why; }

static const moor__curl_api stubs = {
    s_global_init,     s_easy_init,      s_easy_setopt,     s_easy_getinfo,         s_easy_perform,
    s_easy_cleanup,    s_strerror,       s_free,            s_slist_append,         s_slist_free_all,
    s_multi_init,      s_multi_setopt,   s_multi_handle,    s_multi_handle,         s_multi_assign,
    s_multi_socket_action, s_multi_perform, s_multi_poll,   s_multi_info_read,      s_multi_cleanup,
    s_multi_strerror,  s_url,            s_url_cleanup,     s_url_get,              s_url_set,
    s_url_strerror,
};

static moor__curl_api api;
static const moor__curl_api *table = &stubs;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Each entry of api from its symbol (names in the struct's order). */
static const char *const names[] = {
    "curl_global_init",       "curl_easy_init",          "curl_easy_setopt",      "curl_easy_getinfo",
    "curl_easy_perform",      "curl_easy_cleanup",       "curl_easy_strerror",    "curl_free",
    "curl_slist_append",      "curl_slist_free_all",     "curl_multi_init",       "curl_multi_setopt",
    "curl_multi_add_handle",  "curl_multi_remove_handle", "curl_multi_assign",    "curl_multi_socket_action",
    "curl_multi_perform",     "curl_multi_poll",         "curl_multi_info_read",  "curl_multi_cleanup",
    "curl_multi_strerror",    "curl_url",                "curl_url_cleanup",      "curl_url_get",
    "curl_url_set",           "curl_url_strerror",
};

static void load(void) {
  void *h = dlopen(MOOR_CURL_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(why, sizeof why, "libcurl could not be loaded: %s (install libcurl4)", e ? e : MOOR_CURL_SONAME);
    return;
  }
  _Static_assert(sizeof api == sizeof names / sizeof names[0] * sizeof(void (*)(void)), "one name per entry");
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *sym = dlsym(h, names[i]);
    if (!sym) {
      snprintf(why, sizeof why, "libcurl could not be loaded: %s has no %s (libcurl 7.66 or later is needed)",
               MOOR_CURL_SONAME, names[i]);
      return; /* (h stays open: harmless, and what was found is unused) */
    }
    /* (POSIX: a function pointer is a void *'s size; ISO C has no cast between them) */
    memcpy((char *)&api + i * sizeof sym, &sym, sizeof sym);
  }
  table = &api;
}

const moor__curl_api *moor__curl(void) {
  pthread_once(&once, load);
  return table;
}
