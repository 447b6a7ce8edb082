/* chat_page — the chat page served at GET / (src/http/chat_page.html; the Makefile turns it into
 * $(BUILD)/gen/chat_page.c at build time, so the page ships inside the binary). */
#ifndef LMS_HTTP_CHAT_PAGE_H
#define LMS_HTTP_CHAT_PAGE_H

#include <stddef.h>

extern const unsigned char http_chat_page[]; /* NUL-terminated */
extern const size_t http_chat_page_len;      /* bytes, without the NUL */

#endif
