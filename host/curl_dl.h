/* libcurl, loaded at its first use (curl_dl.c): include after <curl/curl.h>.
 * Linking libcurl costs every start of moor its thirty-odd libraries'
 * loading and relocation (about 8 ms of a restart on the development VM)
 * though most runs never make a request; so the host does not link it, and
 * each curl_* call below goes through a table dlopen() fills on the first
 * one. When libcurl cannot be loaded, the table holds stubs that fail as
 * curl does when it cannot start (NULL handles, CURLE_FAILED_INIT, ...),
 * with curl_easy_strerror saying why. */
#ifndef MOOR_CURL_DL_H
#define MOOR_CURL_DL_H

#include <curl/curl.h>

typedef struct moor__curl_api {
  CURLcode (*global_init)(long flags);
  CURL *(*easy_init)(void);
  CURLcode (*easy_setopt)(CURL *c, CURLoption opt, ...);
  CURLcode (*easy_getinfo)(CURL *c, CURLINFO info, ...);
  CURLcode (*easy_perform)(CURL *c);
  void (*easy_cleanup)(CURL *c);
  const char *(*easy_strerror)(CURLcode code);
  void (*free)(void *p);
  struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
  void (*slist_free_all)(struct curl_slist *l);
  CURLM *(*multi_init)(void);
  CURLMcode (*multi_setopt)(CURLM *m, CURLMoption opt, ...);
  CURLMcode (*multi_add_handle)(CURLM *m, CURL *c);
  CURLMcode (*multi_remove_handle)(CURLM *m, CURL *c);
  CURLMcode (*multi_assign)(CURLM *m, curl_socket_t fd, void *p);
  CURLMcode (*multi_socket_action)(CURLM *m, curl_socket_t fd, int ev, int *running);
  CURLMcode (*multi_perform)(CURLM *m, int *running);
  CURLMcode (*multi_poll)(CURLM *m, struct curl_waitfd *fds, unsigned n, int ms, int *numfds);
  CURLMsg *(*multi_info_read)(CURLM *m, int *left);
  CURLMcode (*multi_cleanup)(CURLM *m);
  const char *(*multi_strerror)(CURLMcode code);
  CURLU *(*url)(void);
  void (*url_cleanup)(CURLU *u);
  CURLUcode (*url_get)(const CURLU *u, CURLUPart what, char **part, unsigned int flags);
  CURLUcode (*url_set)(CURLU *u, CURLUPart what, const char *part, unsigned int flags);
  const char *(*url_strerror)(CURLUcode code);
} moor__curl_api;

/* The table: libcurl's functions, or the stubs (never NULL). */
const moor__curl_api *moor__curl(void);

/* (curl.h's type-checking macros for GCC go: these replace them) */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#undef curl_multi_setopt
#define curl_global_init(...) (moor__curl()->global_init(__VA_ARGS__))
#define curl_easy_init() (moor__curl()->easy_init())
#define curl_easy_setopt(...) (moor__curl()->easy_setopt(__VA_ARGS__))
#define curl_easy_getinfo(...) (moor__curl()->easy_getinfo(__VA_ARGS__))
#define curl_easy_perform(...) (moor__curl()->easy_perform(__VA_ARGS__))
#define curl_easy_cleanup(...) (moor__curl()->easy_cleanup(__VA_ARGS__))
#define curl_easy_strerror(...) (moor__curl()->easy_strerror(__VA_ARGS__))
#define curl_free(...) (moor__curl()->free(__VA_ARGS__))
#define curl_slist_append(...) (moor__curl()->slist_append(__VA_ARGS__))
#define curl_slist_free_all(...) (moor__curl()->slist_free_all(__VA_ARGS__))
#define curl_multi_init() (moor__curl()->multi_init())
#define curl_multi_setopt(...) (moor__curl()->multi_setopt(__VA_ARGS__))
#define curl_multi_add_handle(...) (moor__curl()->multi_add_handle(__VA_ARGS__))
#define curl_multi_remove_handle(...) (moor__curl()->multi_remove_handle(__VA_ARGS__))
#define curl_multi_assign(...) (moor__curl()->multi_assign(__VA_ARGS__))
#define curl_multi_socket_action(...) (moor__curl()->multi_socket_action(__VA_ARGS__))
#define curl_multi_perform(...) (moor__curl()->multi_perform(__VA_ARGS__))
#define curl_multi_poll(...) (moor__curl()->multi_poll(__VA_ARGS__))
#define curl_multi_info_read(...) (moor__curl()->multi_info_read(__VA_ARGS__))
#define curl_multi_cleanup(...) (moor__curl()->multi_cleanup(__VA_ARGS__))
#define curl_multi_strerror(...) (moor__curl()->multi_strerror(__VA_ARGS__))
#define curl_url() (moor__curl()->url())
#define curl_url_cleanup(...) (moor__curl()->url_cleanup(__VA_ARGS__))
#define curl_url_get(...) (moor__curl()->url_get(__VA_ARGS__))
#define curl_url_set(...) (moor__curl()->url_set(__VA_ARGS__))
#define curl_url_strerror(...) (moor__curl()->url_strerror(__VA_ARGS__))

#endif
