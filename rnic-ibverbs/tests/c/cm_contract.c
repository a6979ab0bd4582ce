/* rdma_cm's contract on rnic's librdmacm.so.1, one process, both sides on rnic0 (as
 * rdma-core's own rdma_cm tests run): what librdmacm promises that rping and perftest do
 * not show. Build: cc cm_contract.c -lrdmacm -libverbs (against rdma-core's headers), run
 * with rnic's libraries first on LD_LIBRARY_PATH. Argument: rnic0's address. */
#include "check.h"
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <arpa/inet.h>
#include <unistd.h>

static struct rdma_event_channel *ch;

/* The next event on `c` (blocking), of type `want`, with its id. */
static struct rdma_cm_event *expect(struct rdma_event_channel *c, enum rdma_cm_event_type want, const char *what)
{
	struct rdma_cm_event *ev;
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 20000) == 1, "%s: the channel's fd never became readable", what);
	CHECK(rdma_get_cm_event(c, &ev) == 0, "%s: rdma_get_cm_event", what);
	CHECK(ev->event == want, "%s: got %s (status %d), want %s", what, rdma_event_str(ev->event), ev->status,
	      rdma_event_str(want));
	return ev;
}

static struct sockaddr_in addr_of(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	CHECK(inet_pton(AF_INET, ip, &a.sin_addr) == 1, "address %s", ip);
	return a;
}

/* An active id with its address and route resolved towards ip:port. */
static struct rdma_cm_id *resolved(const char *ip, int port)
{
	struct rdma_cm_id *id;
	struct sockaddr_in dst = addr_of(ip, port);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "rdma_resolve_addr");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, "resolve addr"));
	CHECK(id->verbs != NULL && id->pd != NULL, "a resolved id has the device's context and a PD");
	CHECK(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "resolve route"));
	CHECK(id->route.num_paths == 1 && id->route.path_rec != NULL, "one path record");
	return id;
}

int main(int argc, char **argv)
{
	const char *ip = argc > 1 ? argv[1] : "127.0.0.1";
	struct rdma_cm_event *ev;
	struct rdma_cm_id *listen, *cli, *srv;
	/* rdma_create_qp writes back the CQs it made (as librdmacm does): a fresh copy each time. */
	const struct ibv_qp_init_attr qa0 = { .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
						       .max_recv_sge = 1 }, .qp_type = IBV_QPT_RC };
	struct ibv_qp_init_attr qa = qa0;

	ch = rdma_create_event_channel();
	CHECK(ch != NULL, "rdma_create_event_channel");

	/* 1. O_NONBLOCK on the channel's fd: rdma_get_cm_event fails with EAGAIN. */
	int fl = fcntl(ch->fd, F_GETFL);
	CHECK(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "fcntl");
	errno = 0;
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN, "a non-blocking channel with no event: EAGAIN");
	CHECK(fcntl(ch->fd, F_SETFL, fl) == 0, "fcntl");
	OK("an empty non-blocking channel fails with EAGAIN");

	/* 2. Listen on a wildcard, then on the same port again: EADDRINUSE. */
	struct sockaddr_in any = addr_of("0.0.0.0", 0);
	CHECK(rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&any) == 0, "bind the wildcard, port 0");
	int port = ntohs(rdma_get_src_port(listen));
	CHECK(port != 0, "port 0 binds a free port (%d)", port);
	CHECK(rdma_listen(listen, 8) == 0, "rdma_listen");
	struct rdma_cm_id *dup;
	struct sockaddr_in same = addr_of(ip, port);
	CHECK(rdma_create_id(ch, &dup, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	errno = 0;
	CHECK(rdma_bind_addr(dup, (struct sockaddr *)&same) == -1 && errno == EADDRINUSE, "a bound port again: EADDRINUSE");
	CHECK(rdma_destroy_id(dup) == 0, "destroy");
	OK("a wildcard listener on port %d; the port taken twice is EADDRINUSE", port);

	/* 3. Reject with private data: the active side sees REJECTED, status 28 (consumer
	 * reject), the data, and its QP in ERR. */
	cli = resolved(ip, port);
	CHECK(rdma_create_qp(cli, NULL, &qa) == 0, "rdma_create_qp without CQs makes them");
	CHECK(cli->send_cq && cli->recv_cq && cli->send_cq_channel, "the id's CQs and their channels");
	CHECK(rdma_connect(cli, NULL) == 0, "rdma_connect with NULL parameters (the defaults)");
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, "request");
	CHECK(ev->listen_id == listen && ev->id != listen, "the request names its listener and a new id");
	srv = ev->id;
	CHECK(ev->param.conn.qp_num == cli->qp->qp_num, "the request carries the active QP's number");
	rdma_ack_cm_event(ev);
	const char no[] = "not today";
	CHECK(rdma_reject(srv, no, sizeof no) == 0, "rdma_reject");
	ev = expect(ch, RDMA_CM_EVENT_REJECTED, "rejected");
	CHECK(ev->id == cli && ev->status == 28, "REJECTED for the active id, status 28 (got %d)", ev->status);
	CHECK(ev->param.conn.private_data_len >= sizeof no && memcmp(ev->param.conn.private_data, no, sizeof no) == 0,
	      "the REJ's private data");
	rdma_ack_cm_event(ev);
	CHECK(cli->qp->state == IBV_QPS_ERR, "a rejected id's QP is in ERR");
	CHECK(rdma_destroy_id(srv) == 0, "destroy the refused id");
	rdma_destroy_qp(cli);
	CHECK(rdma_destroy_id(cli) == 0, "destroy");
	OK("rdma_reject: REJECTED, status 28, with the private data; the QP in ERR");

	/* 4. An external QP (no rdma_create_qp): CONNECT_RESPONSE, the QP moved with the
	 * attributes rdma_init_qp_attr gives, then rdma_establish; the passive side accepts
	 * with its own QP and private data; data moves; both see DISCONNECTED. */
	cli = resolved(ip, port);
	struct ibv_cq *cq = ibv_create_cq(cli->verbs, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr ea = qa0;
	ea.send_cq = ea.recv_cq = cq;
	struct ibv_qp *xqp = ibv_create_qp(cli->pd, &ea);
	CHECK(xqp != NULL, "ibv_create_qp");
	struct ibv_qp_attr attr;
	int mask;
	attr.qp_state = IBV_QPS_INIT;
	CHECK(rdma_init_qp_attr(cli, &attr, &mask) == 0, "rdma_init_qp_attr(INIT)");
	CHECK(ibv_modify_qp(xqp, &attr, mask) == 0, "to INIT");
	attr.qp_state = IBV_QPS_RTR;
	errno = 0;
	CHECK(rdma_init_qp_attr(cli, &attr, &mask) == -1 && errno == EINVAL, "RTR before a connection: EINVAL");
	const char hello[] = "hello";
	struct rdma_conn_param cp = { .private_data = hello, .private_data_len = sizeof hello, .responder_resources = 1,
				      .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7, .qp_num = xqp->qp_num };
	CHECK(rdma_connect(cli, &cp) == 0, "rdma_connect for an external QP");
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, "request");
	srv = ev->id;
	CHECK(ev->param.conn.private_data_len >= sizeof hello && memcmp(ev->param.conn.private_data, hello, sizeof hello) == 0,
	      "the REQ's private data, after rdma_cm's header");
	CHECK(ev->param.conn.qp_num == xqp->qp_num, "the external QP's number");
	rdma_ack_cm_event(ev);
	qa = qa0;
	CHECK(rdma_create_qp(srv, NULL, &qa) == 0, "passive rdma_create_qp");
	const char welcome[] = "welcome";
	struct rdma_conn_param ap = { .private_data = welcome, .private_data_len = sizeof welcome,
				      .responder_resources = 1, .initiator_depth = 1, .rnr_retry_count = 7 };
	CHECK(rdma_accept(srv, &ap) == 0, "rdma_accept");
	CHECK(srv->qp->state == IBV_QPS_RTS, "rdma_accept brings the passive QP to RTS");
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, "response");
	CHECK(ev->id == cli && ev->param.conn.private_data_len >= sizeof welcome &&
	      memcmp(ev->param.conn.private_data, welcome, sizeof welcome) == 0, "CONNECT_RESPONSE with the REP's data");
	rdma_ack_cm_event(ev);
	attr.qp_state = IBV_QPS_RTR;
	CHECK(rdma_init_qp_attr(cli, &attr, &mask) == 0, "rdma_init_qp_attr(RTR)");
	CHECK(attr.dest_qp_num == srv->qp->qp_num, "RTR's destination is the passive QP");
	CHECK(ibv_modify_qp(xqp, &attr, mask) == 0, "to RTR");
	attr.qp_state = IBV_QPS_RTS;
	CHECK(rdma_init_qp_attr(cli, &attr, &mask) == 0, "rdma_init_qp_attr(RTS)");
	CHECK(ibv_modify_qp(xqp, &attr, mask) == 0, "to RTS");
	CHECK(rdma_establish(cli) == 0, "rdma_establish");
	ev = expect(ch, RDMA_CM_EVENT_ESTABLISHED, "established (passive)");
	CHECK(ev->id == srv, "ESTABLISHED for the passive id");
	rdma_ack_cm_event(ev);
	char buf[64] = "ping over an external QP";
	struct ibv_mr *smr = ibv_reg_mr(cli->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	char rbuf[64] = { 0 };
	struct ibv_mr *rmr = ibv_reg_mr(srv->pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge rs = { (uintptr_t)rbuf, sizeof rbuf, rmr->lkey }, ss = { (uintptr_t)buf, sizeof buf, smr->lkey };
	struct ibv_recv_wr rw = { .sg_list = &rs, .num_sge = 1 }, *brw;
	struct ibv_send_wr sw = { .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *bsw;
	CHECK(ibv_post_recv(srv->qp, &rw, &brw) == 0, "post recv");
	CHECK(ibv_post_send(xqp, &sw, &bsw) == 0, "post send");
	CHECK(wait_wc(cq, "send").status == IBV_WC_SUCCESS, "the send completes");
	CHECK(wait_wc(srv->recv_cq, "recv").status == IBV_WC_SUCCESS, "the receive completes");
	CHECK(strcmp(rbuf, buf) == 0, "the data arrived");
	CHECK(rdma_disconnect(srv) == 0, "rdma_disconnect (passive first)");
	CHECK(srv->qp->state == IBV_QPS_ERR, "rdma_disconnect moves the QP to ERR");
	int seen_cli = 0, seen_srv = 0;
	for (int i = 0; i < 2; i++) {
		ev = expect(ch, RDMA_CM_EVENT_DISCONNECTED, "disconnected");
		seen_cli += ev->id == cli;
		seen_srv += ev->id == srv;
		rdma_ack_cm_event(ev);
	}
	CHECK(seen_cli == 1 && seen_srv == 1, "one DISCONNECTED per side");
	OK("an external QP: CONNECT_RESPONSE, rdma_init_qp_attr, rdma_establish, data, DISCONNECTED on both sides");

	/* 5. rdma_destroy_id waits for its events' acknowledgement; rdma_migrate_id moves an
	 * id's waiting events to another channel. */
	struct rdma_event_channel *ch2 = rdma_create_event_channel();
	CHECK(ch2 != NULL, "a second channel");
	struct rdma_cm_id *m;
	struct sockaddr_in dst = addr_of(ip, port);
	CHECK(rdma_create_id(ch, &m, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_resolve_addr(m, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve");
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 5000) == 1, "the event waits on the first channel");
	CHECK(rdma_migrate_id(m, ch2) == 0, "rdma_migrate_id");
	CHECK(m->channel == ch2, "the id's channel is the new one");
	CHECK(poll(&p, 1, 0) == 0, "nothing waits on the old channel any more");
	ev = expect(ch2, RDMA_CM_EVENT_ADDR_RESOLVED, "migrated event");
	CHECK(ev->id == m, "the moved event names the id");
	rdma_ack_cm_event(ev);
	CHECK(rdma_destroy_id(m) == 0, "destroy");
	CHECK(rdma_destroy_id(listen) == 0, "destroy the listener");
	rdma_destroy_event_channel(ch2);
	OK("rdma_migrate_id moves the id's waiting events");

	/* 6. rdma_getaddrinfo: a passive lookup gives the source address; an active one the
	 * destination; rdma_create_ep makes a synchronous, resolved id. */
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP }, *res;
	char ps[8];
	snprintf(ps, sizeof ps, "%d", port + 1);
	CHECK(rdma_getaddrinfo(ip, ps, &hints, &res) == 0, "rdma_getaddrinfo (passive)");
	CHECK(res->ai_src_addr && res->ai_src_addr->sa_family == AF_INET && !res->ai_dst_addr, "a source address");
	CHECK(ntohs(((struct sockaddr_in *)res->ai_src_addr)->sin_port) == port + 1, "its port");
	rdma_freeaddrinfo(res);
	hints.ai_flags = 0;
	snprintf(ps, sizeof ps, "%d", port);
	CHECK(rdma_getaddrinfo(ip, ps, &hints, &res) == 0, "rdma_getaddrinfo (active)");
	CHECK(res->ai_dst_addr && res->ai_qp_type == IBV_QPT_RC, "a destination, RC");
	struct rdma_cm_id *ep;
	CHECK(rdma_create_ep(&ep, res, NULL, NULL) == 0, "rdma_create_ep");
	CHECK(ep->verbs && ep->route.num_paths == 1, "rdma_create_ep resolves address and route");
	CHECK(ep->event && ep->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED, "a synchronous id keeps its last event");
	rdma_destroy_ep(ep);
	rdma_freeaddrinfo(res);
	OK("rdma_getaddrinfo and rdma_create_ep");

	/* 7. An id destroyed with an event waiting: the destroy returns (the kernel drops the
	 * events not yet taken) and nothing is left on the channel for it. */
	struct rdma_event_channel *ch3 = rdma_create_event_channel();
	struct rdma_cm_id *gone;
	CHECK(rdma_create_id(ch3, &gone, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_resolve_addr(gone, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve");
	struct pollfd p3 = { .fd = ch3->fd, .events = POLLIN };
	CHECK(poll(&p3, 1, 5000) == 1, "the event waits");
	CHECK(rdma_destroy_id(gone) == 0, "rdma_destroy_id with its event not taken");
	CHECK(poll(&p3, 1, 0) == 0, "the destroyed id's event is gone from the channel");
	rdma_destroy_event_channel(ch3);
	OK("an id destroyed with an event waiting");

	/* 8. The disconnected ids of step 4 hear when their TimeWait ends (about 5 s after the
	 * disconnect between rnic devices): TIMEWAIT_EXIT, once each. */
	int exits_cli = 0, exits_srv = 0;
	for (int i = 0; i < 2; i++) {
		ev = expect(ch, RDMA_CM_EVENT_TIMEWAIT_EXIT, "timewait exit");
		exits_cli += ev->id == cli;
		exits_srv += ev->id == srv;
		rdma_ack_cm_event(ev);
	}
	CHECK(exits_cli == 1 && exits_srv == 1, "one TIMEWAIT_EXIT per side");
	CHECK(rdma_destroy_id(srv) == 0 && rdma_destroy_id(cli) == 0, "destroy ids");
	OK("TIMEWAIT_EXIT for both sides of a closed connection");

	rdma_destroy_event_channel(ch);
	return 0;
}
