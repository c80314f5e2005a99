/*
** memprof_fork_rare.sh's host: a child forked by another thread while the profiled thread
** is inside the sampled wrapper's rare path, which then profiles a state of its own and
** exits.
**
** Usage: memprof_fork_rare PARENT_STREAM CHILD_STREAM
** The main thread profiles its state in sampled mode (C API, one sample per 512 bytes,
** the smallest buffer) into PARENT_STREAM and loads chunks, whose functions' names the
** samples write: the buffer fills inside the rare path, and the writer's first call after
** the start has another thread fork there and waits for it. The child starts a sampled
** profile of a new state into CHILD_STREAM (one sample per 2^40 bytes: none, so none of
** its own calls enters the rare path), allocates, and calls exit(0): the profiler's exit
** handler stops that profile. The forking thread prints "child exit N MS" (its status and
** how long it ran) or "child signal N MS".
*/
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "luaprof.h"

static uint8_t parent_buf[LUAPROF_MEMPROF_BUF_MIN], child_buf[LUAPROF_MEMPROF_BUF_MIN];
static int parent_fd = -1, child_fd = -1;
static const char *child_path;
static int armed;
static sem_t go, done;

static size_t put(int fd, const void **data, size_t len)
{
	const uint8_t *p = *data;
	size_t n = 0;
	while (n < len) {
		ssize_t w = write(fd, p + n, len - n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return 0;
		n += (size_t)w;
	}
	return n;
}

static size_t parent_writer(const void **data, size_t len, void *ctx)
{
	(void)ctx;
	if (armed) {
		armed = 0;
		sem_post(&go);
		while (sem_wait(&done) != 0)
			;
	}
	return put(parent_fd, data, len);
}

static size_t child_writer(const void **data, size_t len, void *ctx)
{
	(void)ctx;
	return put(child_fd, data, len);
}

static int closer(void *ctx, uint8_t *buf)
{
	(void)buf;
	return close(*(int *)ctx);
}

static void child_main(void)
{
	child_fd = open(child_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	lua_State *L = luaL_newstate();
	if (child_fd < 0 || !L)
		_exit(3);
	luaL_openlibs(L);
	struct luaprof_memprof_options o = { .buf = child_buf, .len = sizeof(child_buf),
					     .ctx = &child_fd, .writer = child_writer,
					     .on_stop = closer, .sample_bytes = (uint64_t)1 << 40 };
	if (luaprof_memprof_start(L, &o) != LUAPROF_PROFILE_SUCCESS) {
		fprintf(stderr, "child start: %s\n", luaprof_memprof_error());
		_exit(4);
	}
	(void)luaL_dostring(L, "local t = {} for i = 1, 1000 do t[i] = { i } end");
	exit(0);
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void *forker_main(void *arg)
{
	(void)arg;
	while (sem_wait(&go) != 0)
		;
	fflush(NULL);
	uint64_t t0 = now_ms();
	pid_t pid = fork();
	if (pid == 0)
		child_main();
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		printf("child none\n");
	else if (WIFSIGNALED(st))
		printf("child signal %d %llu\n", WTERMSIG(st), (unsigned long long)(now_ms() - t0));
	else
		printf("child exit %d %llu\n", WEXITSTATUS(st), (unsigned long long)(now_ms() - t0));
	fflush(stdout);
	sem_post(&done);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: memprof_fork_rare PARENT_STREAM CHILD_STREAM\n");
		return 1;
	}
	child_path = argv[2];
	parent_fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	lua_State *L = luaL_newstate();
	pthread_t th;
	if (parent_fd < 0 || !L || sem_init(&go, 0, 0) || sem_init(&done, 0, 0) ||
	    pthread_create(&th, NULL, forker_main, NULL)) {
		fprintf(stderr, "memprof_fork_rare: cannot set up\n");
		return 1;
	}
	luaL_openlibs(L);
	struct luaprof_memprof_options o = { .buf = parent_buf, .len = sizeof(parent_buf),
					     .ctx = &parent_fd, .writer = parent_writer,
					     .on_stop = closer, .sample_bytes = 512 };
	if (luaprof_memprof_start(L, &o) != LUAPROF_PROFILE_SUCCESS) {
		fprintf(stderr, "start: %s\n", luaprof_memprof_error());
		return 1;
	}
	armed = 1;
	if (luaL_dostring(L, "local k = {}\n"
			     "for i = 1, 20000 do\n"
			     "  local f = load('local t = {} for j = 1, 8 do t[j] = { j } end "
			     "return t -- chunk ' .. i)\n"
			     "  k[i % 100] = f()\n"
			     "end")) {
		fprintf(stderr, "%s\n", lua_tostring(L, -1));
		return 1;
	}
	if (armed) {
		fprintf(stderr, "memprof_fork_rare: the writer was not called while profiling\n");
		return 1;
	}
	if (luaprof_memprof_stop(L) != LUAPROF_PROFILE_SUCCESS) {
		fprintf(stderr, "stop: %s\n", luaprof_memprof_error());
		return 1;
	}
	pthread_join(th, NULL);
	lua_close(L);
	return 0;
}
