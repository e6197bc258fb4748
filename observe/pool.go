package observe

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// PoolCollector exports a pgxpool's statistics (pgxpool.Stat) at each
// scrape. pgxpool does not report how many acquires wait at one instant;
// orderly_db_pool_empty_acquires_total (acquires that found no idle
// connection and waited) and orderly_db_pool_acquire_wait_seconds_total
// (their total wait) stand for it: their rates are the waiting.
type PoolCollector struct {
	pool *pgxpool.Pool
}

// NewPoolCollector returns the collector of pool.
func NewPoolCollector(pool *pgxpool.Pool) *PoolCollector { return &PoolCollector{pool: pool} }

var (
	poolAcquired = prometheus.NewDesc("orderly_db_pool_acquired_connections",
		"PostgreSQL connections acquired from the pool now.", nil, nil)
	poolIdle = prometheus.NewDesc("orderly_db_pool_idle_connections",
		"Idle PostgreSQL connections in the pool now.", nil, nil)
	poolConstructing = prometheus.NewDesc("orderly_db_pool_constructing_connections",
		"PostgreSQL connections being opened now.", nil, nil)
	poolTotal = prometheus.NewDesc("orderly_db_pool_total_connections",
		"PostgreSQL connections in the pool now (acquired, idle and being opened).", nil, nil)
	poolMax = prometheus.NewDesc("orderly_db_pool_max_connections",
		"The pool's size (ORDERD_DB_MAX_CONNS).", nil, nil)
	poolAcquires = prometheus.NewDesc("orderly_db_pool_acquires_total",
		"Successful acquires of a connection from the pool.", nil, nil)
	poolEmptyAcquires = prometheus.NewDesc("orderly_db_pool_empty_acquires_total",
		"Acquires that found no idle connection and waited for one.", nil, nil)
	poolCanceled = prometheus.NewDesc("orderly_db_pool_canceled_acquires_total",
		"Acquires whose context ended before a connection was had.", nil, nil)
	poolWait = prometheus.NewDesc("orderly_db_pool_acquire_wait_seconds_total",
		"Seconds acquires spent waiting for a connection, in all.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *PoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolAcquired, poolIdle, poolConstructing, poolTotal, poolMax,
		poolAcquires, poolEmptyAcquires, poolCanceled, poolWait} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *PoolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(poolAcquired, float64(s.AcquiredConns()))
	gauge(poolIdle, float64(s.IdleConns()))
	gauge(poolConstructing, float64(s.ConstructingConns()))
	gauge(poolTotal, float64(s.TotalConns()))
	gauge(poolMax, float64(s.MaxConns()))
	counter(poolAcquires, float64(s.AcquireCount()))
	counter(poolEmptyAcquires, float64(s.EmptyAcquireCount()))
	counter(poolCanceled, float64(s.CanceledAcquireCount()))
	counter(poolWait, s.EmptyAcquireWaitTime().Seconds())
}
