-- The metrics a sample's host has no sensor for (issue 29: "no sensor"
-- instead of 0 °C): bit i for resource.MetricNames[i] (tempCpu is 8), as
-- the agent's metric.missing names them. 0 for the samples of older
-- agents, which sent 0 for "no sensor", and of every host with all sensors.
ALTER TABLE metrics ADD COLUMN missing integer NOT NULL DEFAULT 0;
