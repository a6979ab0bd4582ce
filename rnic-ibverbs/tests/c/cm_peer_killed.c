/* A peer process killed after ESTABLISHED, both sides on one shared device: the survivor
 * gets DISCONNECTED, as Linux's kernel closes a dead process's connections with a DREQ,
 * and nothing is in flight that could time out instead. The process forks before either
 * side touches the library (each side is its own member of the device). Argument: the
 * device's address. */
#include "check.h"
#include <arpa/inet.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, int ms, const char *what)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	CHECK(poll(&p, 1, ms) == 1, "%s: no event within %d ms", what, ms);
	CHECK(rdma_get_cm_event(ch, &ev) == 0, "%s: rdma_get_cm_event", what);
	return ev;
}

static void expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want, const char *what)
{
	struct rdma_cm_event *ev = next_event(ch, 20000, what);
	CHECK(ev->event == want, "%s: got %s, want %s", what, rdma_event_str(ev->event), rdma_event_str(want));
	rdma_ack_cm_event(ev);
}

int main(int argc, char **argv)
{
	const char *ip = argc > 1 ? argv[1] : "127.0.0.1";
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(7690) };
	CHECK(inet_pton(AF_INET, ip, &addr.sin_addr) == 1, "address");
	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
						.max_recv_sge = 1 }, .qp_type = IBV_QPT_RC };
	int ready[2];
	CHECK(pipe(ready) == 0, "pipe");
	pid_t child = fork();
	CHECK(child >= 0, "fork");
	if (child == 0) {
		/* The active side: connect once the listener is up, then die without a word. */
		char c;
		close(ready[1]);
		if (read(ready[0], &c, 1) != 1)
			_exit(3);
		struct rdma_event_channel *ch = rdma_create_event_channel();
		struct rdma_cm_id *id;
		CHECK(ch && rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "child: create id");
		CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&addr, 2000) == 0, "child: resolve addr");
		expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, "child: address");
		CHECK(rdma_resolve_route(id, 2000) == 0, "child: resolve route");
		expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "child: route");
		CHECK(rdma_create_qp(id, NULL, &qa) == 0, "child: create qp");
		CHECK(rdma_connect(id, NULL) == 0, "child: connect");
		expect(ch, RDMA_CM_EVENT_ESTABLISHED, "child: established");
		kill(getpid(), SIGKILL);
		_exit(4);
	}
	close(ready[0]);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen, *conn;
	CHECK(ch && rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0, "create id");
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&addr) == 0, "bind");
	CHECK(rdma_listen(listen, 1) == 0, "listen");
	CHECK(write(ready[1], "x", 1) == 1, "tell the child");
	struct rdma_cm_event *ev = next_event(ch, 20000, "request");
	CHECK(ev->event == RDMA_CM_EVENT_CONNECT_REQUEST, "a request, got %s", rdma_event_str(ev->event));
	conn = ev->id;
	rdma_ack_cm_event(ev);
	CHECK(rdma_create_qp(conn, NULL, &qa) == 0, "create qp");
	CHECK(rdma_accept(conn, NULL) == 0, "accept");
	expect(ch, RDMA_CM_EVENT_ESTABLISHED, "established");
	int status;
	CHECK(waitpid(child, &status, 0) == child && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
	      "the child was killed after ESTABLISHED (status %#x)", status);
	OK("the active process was killed after ESTABLISHED");
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ev = next_event(ch, 10000, "the dead peer's connection");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK(ev->event == RDMA_CM_EVENT_DISCONNECTED && ev->id == conn, "DISCONNECTED, got %s",
	      rdma_event_str(ev->event));
	rdma_ack_cm_event(ev);
	double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	OK("DISCONNECTED %.2f s after the peer died", s);
	CHECK(rdma_disconnect(conn) == 0, "rdma_disconnect after DISCONNECTED");
	rdma_destroy_qp(conn);
	CHECK(rdma_destroy_id(conn) == 0 && rdma_destroy_id(listen) == 0, "destroy");
	rdma_destroy_event_channel(ch);
	return 0;
}
