// Package faultproxy is a TCP proxy on a loopback port that injects the
// faults a network and a client's patience produce in front of one HTTP/1.1
// server: it swallows replies after forwarding the request (the request
// took effect and the client cannot know), resets connections before
// forwarding, and tears replies mid-way. Fates are drawn per request from a
// seeded source, so a run can be repeated.
package faultproxy
