/* A small C consumer and producer of the Arrow C (Device) Data Interface, compiled by
 * tests/c_device_host.rs with the system C compiler and loaded with dlopen. It checks
 * the ABI from the C side: struct layouts, walking exported arrays, calling release
 * callbacks, consuming a device array stream, moving a child out, and producing an
 * array whose release callback devbuf must call exactly once.
 *
 * The definitions below are the ones printed in Arrow's CDataInterface.rst and
 * CDeviceDataInterface.rst (with their canonical include guards). */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
  const char* format;
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;
  void (*release)(struct ArrowSchema*);
  void* private_data;
};

struct ArrowArray {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;
  struct ArrowArray** children;
  struct ArrowArray* dictionary;
  void (*release)(struct ArrowArray*);
  void* private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

#ifndef ARROW_C_DEVICE_DATA_INTERFACE
#define ARROW_C_DEVICE_DATA_INTERFACE

typedef int32_t ArrowDeviceType;

#define ARROW_DEVICE_CPU 1
#define ARROW_DEVICE_CUDA 2
#define ARROW_DEVICE_CUDA_HOST 3

struct ArrowDeviceArray {
  struct ArrowArray array;
  int64_t device_id;
  ArrowDeviceType device_type;
  void* sync_event;
  int64_t reserved[3];
};

#endif /* ARROW_C_DEVICE_DATA_INTERFACE */

#ifndef ARROW_C_DEVICE_STREAM_INTERFACE
#define ARROW_C_DEVICE_STREAM_INTERFACE

struct ArrowDeviceArrayStream {
  ArrowDeviceType device_type;
  int (*get_schema)(struct ArrowDeviceArrayStream*, struct ArrowSchema*);
  int (*get_next)(struct ArrowDeviceArrayStream*, struct ArrowDeviceArray*);
  const char* (*get_last_error)(struct ArrowDeviceArrayStream*);
  void (*release)(struct ArrowDeviceArrayStream*);
  void* private_data;
};

#endif /* ARROW_C_DEVICE_STREAM_INTERFACE */

/* Sizes and offsets, in the order tests/c_device_host.rs expects. */
int cdi_layout(int64_t* out, int n) {
  int64_t v[] = {
      sizeof(struct ArrowArray),
      offsetof(struct ArrowArray, length),
      offsetof(struct ArrowArray, null_count),
      offsetof(struct ArrowArray, offset),
      offsetof(struct ArrowArray, n_buffers),
      offsetof(struct ArrowArray, n_children),
      offsetof(struct ArrowArray, buffers),
      offsetof(struct ArrowArray, children),
      offsetof(struct ArrowArray, dictionary),
      offsetof(struct ArrowArray, release),
      offsetof(struct ArrowArray, private_data),
      sizeof(struct ArrowDeviceArray),
      offsetof(struct ArrowDeviceArray, array),
      offsetof(struct ArrowDeviceArray, device_id),
      offsetof(struct ArrowDeviceArray, device_type),
      offsetof(struct ArrowDeviceArray, sync_event),
      offsetof(struct ArrowDeviceArray, reserved),
      sizeof(struct ArrowDeviceArrayStream),
      offsetof(struct ArrowDeviceArrayStream, device_type),
      offsetof(struct ArrowDeviceArrayStream, get_schema),
      offsetof(struct ArrowDeviceArrayStream, get_next),
      offsetof(struct ArrowDeviceArrayStream, get_last_error),
      offsetof(struct ArrowDeviceArrayStream, release),
      offsetof(struct ArrowDeviceArrayStream, private_data),
      sizeof(struct ArrowSchema),
  };
  int count = (int)(sizeof(v) / sizeof(v[0]));
  for (int i = 0; i < count && i < n; i++) out[i] = v[i];
  return count;
}

static void append(char* buf, size_t cap, const char* text) {
  size_t used = strlen(buf);
  if (used + 1 < cap) strncat(buf, text, cap - used - 1);
}

static void describe(const struct ArrowArray* a, char* buf, size_t cap) {
  char tmp[160];
  snprintf(tmp, sizeof tmp, "(len=%lld nulls=%lld off=%lld nbuf=%lld",
           (long long)a->length, (long long)a->null_count, (long long)a->offset,
           (long long)a->n_buffers);
  append(buf, cap, tmp);
  for (int64_t i = 0; i < a->n_buffers; i++) {
    append(buf, cap, a->buffers[i] == NULL ? " null" : " buf");
  }
  for (int64_t i = 0; i < a->n_children; i++) {
    append(buf, cap, " ");
    describe(a->children[i], buf, cap);
  }
  if (a->dictionary != NULL) {
    append(buf, cap, " dict=");
    describe(a->dictionary, buf, cap);
  }
  append(buf, cap, ")");
}

/* Describes the array's structure into `buf`, then releases it as a consumer must:
 * through the base structure's callback, which marks it released. Returns 0, or -1
 * when the array was released already, -2 when release did not mark it released. */
int cdi_describe_and_release(struct ArrowDeviceArray* d, char* buf, size_t cap) {
  buf[0] = 0;
  if (d->array.release == NULL) return -1;
  char tmp[96];
  snprintf(tmp, sizeof tmp, "device_type=%d device_id=%lld sync=%s reserved=%lld,%lld,%lld ",
           (int)d->device_type, (long long)d->device_id, d->sync_event ? "yes" : "no",
           (long long)d->reserved[0], (long long)d->reserved[1], (long long)d->reserved[2]);
  append(buf, cap, tmp);
  describe(&d->array, buf, cap);
  d->array.release(&d->array);
  return d->array.release == NULL ? 0 : -2;
}

/* Sum of the valid values of a CPU int32 array (honouring offset and validity), then
 * release. */
int64_t cdi_sum_int32_and_release(struct ArrowDeviceArray* d) {
  const struct ArrowArray* a = &d->array;
  const uint8_t* valid = (const uint8_t*)a->buffers[0];
  const int32_t* values = (const int32_t*)a->buffers[1];
  int64_t sum = 0;
  for (int64_t i = 0; i < a->length; i++) {
    int64_t j = a->offset + i;
    if (valid == NULL || (valid[j / 8] >> (j % 8)) & 1) sum += values[j];
  }
  d->array.release(&d->array);
  return sum;
}

/* Moves child `i` out into `out` (bitwise copy, source marked released) and releases
 * the parent immediately, as the C Data Interface's "moving child arrays" requires. */
int cdi_move_child_and_release_parent(struct ArrowDeviceArray* d, int i, struct ArrowArray* out) {
  if (d->array.release == NULL || i < 0 || i >= d->array.n_children) return -1;
  struct ArrowArray* child = d->array.children[i];
  *out = *child;
  child->release = NULL;
  d->array.release(&d->array);
  return d->array.release == NULL ? 0 : -2;
}

/* ---- A C producer: int32 [1, null, 3, 4] on the CPU. ---- */

static int release_calls = 0;

struct int32_private {
  const void* buffers[2];
  uint8_t validity[1];
  int32_t values[4];
};

static void release_int32(struct ArrowArray* a) {
  if (a->release == NULL) return;
  free(a->private_data);
  a->private_data = NULL;
  a->release = NULL;
  release_calls++;
}

void cdi_make_int32(struct ArrowDeviceArray* out) {
  struct int32_private* p = (struct int32_private*)malloc(sizeof *p);
  p->validity[0] = 0x0D; /* 1011: element 1 is null */
  p->values[0] = 1;
  p->values[1] = 0;
  p->values[2] = 3;
  p->values[3] = 4;
  p->buffers[0] = p->validity;
  p->buffers[1] = p->values;
  memset(out, 0, sizeof *out);
  out->array.length = 4;
  out->array.null_count = 1;
  out->array.offset = 0;
  out->array.n_buffers = 2;
  out->array.n_children = 0;
  out->array.buffers = p->buffers;
  out->array.children = NULL;
  out->array.dictionary = NULL;
  out->array.release = release_int32;
  out->array.private_data = p;
  out->device_id = -1;
  out->device_type = ARROW_DEVICE_CPU;
  out->sync_event = NULL;
}

int cdi_release_calls(void) { return release_calls; }

/* ---- Consuming a stream, as the C Stream Interface's consumer example does. ---- */

/* Returns the total number of rows, or -1 with the producer's message in `err`. The
 * stream is released in both cases. `format` receives the schema's format string. */
int64_t cdi_stream_rows(struct ArrowDeviceArrayStream* s, char* format, size_t format_cap,
                        char* err, size_t err_cap) {
  struct ArrowSchema schema;
  err[0] = 0;
  format[0] = 0;
  int code = s->get_schema(s, &schema);
  if (code != 0) {
    const char* msg = s->get_last_error(s);
    snprintf(err, err_cap, "get_schema %d: %s", code, msg ? msg : "(null)");
    s->release(s);
    return -1;
  }
  snprintf(format, format_cap, "%s", schema.format);
  schema.release(&schema);
  int64_t rows = 0;
  for (;;) {
    struct ArrowDeviceArray chunk;
    code = s->get_next(s, &chunk);
    if (code != 0) {
      const char* msg = s->get_last_error(s);
      snprintf(err, err_cap, "get_next %d: %s", code, msg ? msg : "(null)");
      s->release(s);
      return -1;
    }
    if (chunk.array.release == NULL) break; /* end of stream */
    if (chunk.device_type != s->device_type) {
      snprintf(err, err_cap, "chunk on device type %d, stream says %d", (int)chunk.device_type,
               (int)s->device_type);
      chunk.array.release(&chunk.array);
      s->release(s);
      return -1;
    }
    rows += chunk.array.length;
    chunk.array.release(&chunk.array);
  }
  s->release(s);
  return s->release == NULL ? rows : -2;
}
