/*
** A profile's file for the Lua API and `luaprof record`: opened without emptying it, fed
** through the profilers' writer callback, and written either by the caller or by a thread
** of its own behind a double buffer.
*/
#ifndef AGENT_PFILE_H
#define AGENT_PFILE_H

#include <stddef.h>
#include <stdint.h>

struct agent_pfile;

/*
** Opens path for writing without emptying it, so that a start that fails after this (an
** unknown VM build, no timer) leaves a file that was there as it was; *created tells
** whether open made the file, which such a start removes (agent_pfile_refused), and so
** does a terminating signal before the start (agent_termstop_newfile). Contents
** are dropped at the first write, which only a started profile makes. With threaded, a thread of the file's own writes it, and
** the profiled thread waits for write(2) only when the disk falls a whole buffer behind;
** without (or when no thread can be made), the writer callback writes. NULL with errno on
** failure: EBUSY when a file still open here (another profile's) is that regular file.
*/
struct agent_pfile *agent_pfile_open(const char *path, int threaded, int *created);

/*
** The start f was opened for failed: f's close, the on_stop that the failed start calls,
** removes the file if open created it, as the caller would once the start returned. The
** profilers call this ahead of that on_stop when their writer is agent_pfile_write: a
** terminating signal held during the start is delivered as the start returns
** (termstop.c), and ended the process before the caller's removal, the file left empty.
** NULL: nothing.
*/
void agent_pfile_refused(struct agent_pfile *f);

/*
** The profile writing to f has started: a file that had contents is emptied now. The memory
** profiler may write nothing for a long time (its first buffer half fills first), and a run
** cut short before that must not leave the previous profile in place, looking whole. A
** failure is left for the first write to report.
*/
void agent_pfile_started(struct agent_pfile *f);

/*
** From now on the stream written to f is raw allocation events (rawev.h), which f encodes
** into ljm before writing them: on its thread when threaded, so that exact-mode memprof
** leaves the encoding off the VM's thread. Call before the first write. 0, or -1 with
** errno (ENOMEM).
*/
int agent_pfile_raw(struct agent_pfile *f);

/* Nonzero when a thread of f's own writes it. */
int agent_pfile_threaded(const struct agent_pfile *f);

/* The buffer to hand the profiler: the whole buffer, or its first half when threaded. */
uint8_t *agent_pfile_buf(struct agent_pfile *f, size_t *len);

/* The profilers' writer callback (lp_wbuf's contract). Threaded, it hands the full half to
 * the thread and returns the other one; a write that failed is reported at the next call,
 * or by agent_pfile_close. */
size_t agent_pfile_write(const void **data, size_t len, void *ctx);

/* The profilers' on_stop callback: waits for the last write, stops the thread, closes the
 * file and frees f (NULL: nothing). 0, or -1 with errno from the first failed write, EPROTO
 * for raw events that were malformed or ended inside a blob, or from close(2). */
int agent_pfile_close(void *ctx, uint8_t *buf);

/* From now on agent_pfile_close leaves each file's memory mapped (its buffer too), for an
 * exit at which another thread may still write a record into the buffer it had taken
 * (memprof.c's events_close): the process ends, and the write lands nowhere it can fault. */
void agent_pfile_keep_mapped(void);

#endif
